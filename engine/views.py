"""Plain-data views of the engine for viewers and exports: snapshot(), metrics(), request views.

Views only read. A finished request's view is built once and shared by every snapshot until
the request changes (viewers read views, never write them).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .blocks import BlockManager
from .config import EngineConfig
from .history import History
from .metrics import Observer
from .model import TinyModel
from .prefixes import Prefixes
from .request import Request, Status


def _short(digest: str | None) -> str | None:
    """A block hash as viewers show it (the full one keys the "blocks" cache)."""
    return None if digest is None else digest[:8]


class Views:
    observer: Observer  # the engine sets it: the trace's metrics

    def __init__(
        self,
        config: EngineConfig,
        models: dict[str, TinyModel],
        requests: dict[str, Request],
        queue: deque[str],
        order: list[str],
        blocks: BlockManager,
        prefixes: Prefixes,
        history: History,
        counters: dict[str, int],
    ) -> None:
        self.config = config
        self.models = models
        self.requests = requests
        self.queue = queue
        self.order = order
        self.blocks = blocks
        self.prefixes = prefixes
        self.history = history
        self.counters = counters
        # request id -> (the request, whether it committed this round, the view).
        self.finished: dict[str, tuple[Request, bool, dict[str, Any]]] = {}

    def _unfinished_tables(self) -> list[list[int]]:
        # Between rounds every unfinished request is in the queue (a round takes its batch out).
        return [self.requests[i].table for i in self.queue]

    def metrics(self) -> dict[str, dict[str, Any]]:
        cache_only = self.prefixes.blocks_only_cached(self._unfinished_tables())
        counts = self.blocks.counts(cache_only)
        c = self.counters
        queue = [self.requests[i].status for i in self.queue]
        return {
            "blocks": {
                "total": counts.total,
                "free": counts.free,
                "used": counts.used,
                "held": counts.held,
                "cached": counts.cached,
                "shared": counts.shared,
                "retained": counts.retained,
            },
            "cache": {"hot": c["hot"], "warm": c["warm"], "cold": c["cold"]},
            "drafts": {
                "proposed": c["proposed"],
                "verified": c["verified"],
                "accepted": c["accepted"],
            },
            "work": {
                key: c[key]
                for key in (
                    "target_forwards",
                    "draft_forwards",
                    "encoder_rows",
                    "consumer_rows",
                    "draft_rows",
                )
            },
            "requests": {
                # Unfinished requests are exactly the queue; finished ones, the finish order.
                "queued": queue.count(Status.QUEUED),
                "running": queue.count(Status.RUNNING),
                "finished": len(self.order),
                "committed_tokens": c["committed_tokens"],
                "preemptions": c["preemptions"],
                "evictions": c["evictions"],
                "rolled_back_positions": c["rolled_back_positions"],
            },
            "serving": self.observer.serving(
                synthetic=self.config.synthetic_clock,
                held_blocks=counts.held,
                total_blocks=counts.total,
            ),
        }

    def snapshot(self, tick: int, now: float) -> dict[str, Any]:
        """A JSON-serialisable view of the whole engine (see Engine.snapshot)."""
        states = self.blocks.states(self._unfinished_tables(), self.prefixes.held_blocks())
        refcounts = self.blocks.refcounts()  # plain ints, read once (viewers call this often)
        requests = [self.request(r, tick, states, refcounts) for r in self.requests.values()]
        dropped_now = {block for view in requests for block in view["dropped_blocks"]}
        pool_blocks = []
        for block, (count, digest) in enumerate(zip(refcounts, self.blocks.hashes())):
            state = states.get(block, "free")
            if state == "free" and block in dropped_now:
                state = "dropped"
            pool_blocks.append(
                {"id": block, "state": state, "refcount": count, "hash": _short(digest)}
            )
        metrics = self.metrics()
        verified = metrics["drafts"]["verified"]
        return {
            "tick": tick,
            "clock": now,
            "idle": not self.queue,
            "config": self.config.to_dict(),
            "models": {
                role: {
                    "identity": m.identity,
                    "vocab_size": m.vocab_size,
                    "width": m.width,
                    "depth": m.depth,
                    "window": m.window,
                }
                for role, m in self.models.items()
            },
            "metrics": metrics,
            # Of the draft positions the target verified, the share it accepted (a tree's
            # unverified nodes would make accepted/proposed look worse than speculation is).
            "acceptance": metrics["drafts"]["accepted"] / verified if verified else None,
            "queue": list(self.queue),
            "pool": {
                "num_blocks": self.blocks.num_blocks,
                "block_size": self.config.block_size,
                "blocks": pool_blocks,
                **self.prefixes.pool_view(),
            },
            "cache": self.prefixes.view(now),
            "requests": requests,
            "undo": {"available": len(self.history), "depth": self.config.undo_depth},
        }

    def request(
        self, request: Request, tick: int, states: dict[int, str], refcounts: list[int]
    ) -> dict[str, Any]:
        """The request's part of snapshot()."""
        if not request.finished:
            return self._build(request, tick, states, refcounts)
        commit = request.last_commit
        this_round = commit is not None and commit["round"] == tick
        kept = self.finished.get(request.request_id)
        if kept is not None and kept[0] is request and kept[1] == this_round:
            return kept[2]
        view = self._build(request, tick, states, refcounts)
        self.finished[request.request_id] = (request, this_round, view)
        return view

    def forget(self, request_id: str) -> None:
        """A rolled-back finished request: its view would keep the old object alive."""
        self.finished.pop(request_id, None)

    def forget_unknown(self) -> None:
        """After a rewind: forget views of requests whose submission was undone."""
        if len(self.finished) > len(self.requests):
            kept = {k: v for k, v in self.finished.items() if k in self.requests}
            self.finished.clear()
            self.finished.update(kept)

    def _blocks(self, request: Request, states: dict[int, str], refcounts: list[int]) -> list:
        size = self.config.block_size
        cursor = request.committed()
        hashes = self.blocks.hashes()
        blocks = []
        for index, block in enumerate(request.table):
            start = index * size
            filled = request.tokens[start : min(start + size, cursor)]
            blocks.append(
                {
                    "id": block,
                    "index": index,
                    "first_position": start,
                    "slots": filled + [None] * (size - len(filled)),
                    "refcount": refcounts[block],
                    "state": states.get(block, "committed"),
                    # Only blocks this request has filled and hashed: after a rollback into a
                    # block, the block still holds (and the pool still hashes) its old content
                    # for the cache and undo, but this request's part of it is partial.
                    "hash": _short(hashes[block]) if index < request.hashed else None,
                }
            )
        return blocks

    def _schedule_state(self, request: Request) -> dict[str, Any]:
        """What the scheduler is doing with the request, in words a person reads: queued,
        prefilling (with progress), decoding, waiting (with what for), preempted, finished."""
        computed = request.cursor("target")[1] if request.table else 0
        total = len(request.tokens)
        if request.finished:
            state = "finished"
        elif not request.admitted:
            state = "preempted" if request.preemptions else "queued"
        elif request.waiting_for is not None:
            state = "waiting"
        else:
            state = "prefilling" if total - computed > 1 else "decoding"
        return {
            "state": state,
            "waiting_for": None if request.finished else request.waiting_for,
            # Free blocks its next rows need, while it waits for them (0 otherwise).
            "needs_blocks": request.needs_blocks if state == "waiting" else 0,
            "computed_positions": computed,
            "prefill_total": total,
            "priority": request.priority,
        }

    def _build(
        self, request: Request, tick: int, states: dict[int, str], refcounts: list[int]
    ) -> dict[str, Any]:
        cursor = request.committed()
        commit = request.last_commit
        this_round = commit is not None and commit["round"] == tick
        return {
            "id": request.request_id,
            "status": request.status.value,
            "finish_reason": request.finish_reason,
            "error": request.error,
            "prompt": list(request.prompt),
            "generated": request.tokens[len(request.prompt) :],
            "max_tokens": request.max_tokens,
            "eos_id": request.eos_id,
            "sampling": request.sampling.to_dict(),
            "pending_token": request.tokens[-1],
            "committed_positions": cursor,
            **self._schedule_state(request),
            # Stored positions the pending token's local attention reads (it sees itself too).
            "window": [max(0, cursor - self.models["target"].window + 1), cursor],
            "restore": request.restore,
            "accepted": request.accepted,
            "proposed": request.proposed,
            "preemptions": request.preemptions,
            "timing": self.observer.timing(request.request_id),
            "blocks": self._blocks(request, states, refcounts),
            "dropped_blocks": list(commit["dropped_blocks"]) if this_round and commit else [],
            "last_commit": commit,
            "tree": request.tree,
            "can_cancel": not request.finished,
            "can_rollback": request.generated > 0
            and request.finish_reason not in ("cancelled", "error"),
        }
