"""The scheduler: who runs this round, what each restores, how many positions each verifies,
and who gives up blocks when the pool is short. It never calls a model.

`admit` takes the round's batch out of the queue (restoring a cached prefix at a request's
first admission); `pending_positions` walks the same way without changing anything. `budget`
splits the verification budget over the drafted trees and reserves each request's blocks,
oldest first, making room (trimming undo history, evicting cache entries, preempting the
newest request) when the pool is short.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

from .blocks import BlockManager
from .cache import counted
from .config import EngineConfig
from .history import History
from .model import TinyModel
from .prefixes import Prefixes
from .request import EventLog, Request, Status
from .speculation.budget import choose_budget, select_nodes
from .speculation.proposal import Proposal

Decision = Literal["run", "wait", "skip"]


@dataclass(eq=False)
class Scheduled:
    """One request's verification this round: its proposal and the nodes the target checks."""

    proposal: Proposal
    selected: list[int]
    request: Request  # the proposal's, kept at hand (read several times per request)


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        kv_models: dict[str, TinyModel],
        blocks: BlockManager,
        prefixes: Prefixes,
        history: History,
        log: EventLog,
        counters: dict[str, int],
    ) -> None:
        self.config = config
        self.kv_models = kv_models
        self.blocks = blocks
        self.prefixes = prefixes
        self.history = history
        self.log = log
        self.counters = counters
        self.requests: dict[str, Request] = {}
        self.queue: deque[str] = deque()  # every unfinished request, between rounds
        self.admissions = 0
        self.finished: list[str] = []  # finish order, for run()'s delivery
        self.delivered: set[str] = set()  # results run() or generate() returned
        # The models' identities at the last check for replaced weights (None: check again).
        self.checked_identities: dict[str, str] | None = None

    # -- finishing and reopening ------------------------------------------------------------

    def retire(self, request: Request, reason: str, error: str | None) -> None:
        """A finished request leaves the queue (its blocks already went back)."""
        if request.request_id in self.queue:
            self.queue.remove(request.request_id)
        request.status = Status.FINISHED
        request.finish_reason = reason
        request.error = error
        request.admitted = 0
        request.cursors = {}
        self.finished.append(request.request_id)

    def reopen(self, request: Request) -> Request:
        """A finished request queued again, as a copy (finished objects are shared with the
        undo history)."""
        request = request.copy()
        self.requests[request.request_id] = request
        request.status, request.finish_reason, request.error = Status.QUEUED, None, None
        request.final = None
        request.restore = None  # it holds no rows: the next admission restores afresh
        self.checked_identities = None  # its tokens may predate a weight change
        self.finished.remove(request.request_id)
        self.delivered.discard(request.request_id)
        self.queue.append(request.request_id)
        return request

    def stale(self) -> list[tuple[Request, str]] | None:
        """None if the models are those of the last check (the usual round). Else the
        unfinished requests whose KV or tokens came from models whose weights were replaced
        since, and why: a model never extends KV computed with other weights. Requests that
        computed nothing yet go on."""
        current = self.prefixes.identities()
        if current == self.checked_identities:
            return None
        self.checked_identities = current
        found = []
        for request_id in self.queue:
            request = self.requests[request_id]
            if request.identities is None or request.identities == current:
                continue
            changed = ", ".join(
                f"the {role} model's weights changed (identity {old} -> {current[role]})"
                for role, old in request.identities.items()
                if current[role] != old
            )
            found.append((request, f"{changed} after this request's KV was computed"))
        return found

    # -- admission --------------------------------------------------------------------------

    def batch_cap(self) -> int:
        cap = min(self.config.max_active, self.config.max_batch_tokens)
        if self.config.cost_curve:
            cap = min(cap, self.config.cost_curve[-1][0])
        return cap

    def resident(self) -> int:
        """Requests holding KV now. Every running request is queued between rounds: counted
        there, not over every request ever submitted (finished ones pile up)."""
        return sum(self.requests[i].status == Status.RUNNING for i in self.queue)

    def _walk(self) -> list[tuple[Request, Decision]]:
        """The queue's head in order, each with what this round does with it, until the batch
        is full. Changes nothing: `admit` acts on it, `pending_positions` only counts."""
        walked: list[tuple[Request, Decision]] = []
        cap = self.batch_cap()
        # At most max_active requests hold KV at once: one that is not running yet waits for a
        # place (in its queue position), or round-robin would admit every queued request in
        # turn, run the pool dry and preempt the newest forever while the oldest starve.
        resident = self.resident()
        taken = 0
        for request_id in self.queue:
            if taken == cap:
                break
            request = self.requests[request_id]
            if request.finished:
                walked.append((request, "skip"))
                continue
            if request.status != Status.RUNNING:
                if resident >= self.config.max_active:
                    walked.append((request, "wait"))
                    continue
                resident += 1
            taken += 1  # a zero-token request too: it computes its prompt
            walked.append((request, "run"))
        return walked

    def admit(self, now: float) -> list[Request]:
        """Take this round's batch out of the queue; waiting requests keep their places."""
        batch: list[Request] = []
        waiting: list[str] = []
        for request, decision in self._walk():
            self.queue.popleft()  # the walk visits the queue's head, in order
            if decision == "wait":
                waiting.append(request.request_id)
            if decision in ("wait", "skip"):
                continue
            if request.admitted == 0:
                self.restore(request, now)
            request.status = Status.RUNNING
            batch.append(request)
        self.queue.extendleft(reversed(waiting))
        return batch

    def pending_positions(self) -> int:
        """Rows the next round computes before its first token, at most (see Engine)."""
        total = 0
        for request, decision in self._walk():
            if decision != "run":
                continue
            missing = {
                role: len(request.tokens) - request.committed(role) for role in self.kv_models
            }
            total += missing["target"]
            if missing["target"] <= 1:  # a draft of its own catches up once the target has
                total += missing.get("draft", 0)
        return total

    def restore(self, request: Request, now: float) -> None:
        """Attach the longest usable cached prefix to a request that holds no rows."""
        cfg = self.config
        self.admissions += 1
        request.admitted = self.admissions
        request.fresh = True
        found = self.prefixes.lookup(tuple(request.tokens[:-1]), now)
        reused = found.reused
        if found.blocks:
            self.prefixes.attach(request, found)
            if request.identities is None:  # its rows now come from these weights
                request.identities = self.prefixes.identities()
        consumer = reused if found.cache == "hot" else 0
        request.cursors = {role: [reused, consumer] for role in self.kv_models}
        n = len(request.tokens)
        bounded = cfg.recovery_mode != "exact" and found.cache != "hot"
        request.local_lower = max(0, n - cfg.keep) if bounded else 0
        request.consumer_from = request.local_lower if cfg.recovery_mode == "compact" else 0
        if bounded:
            for cursor in request.cursors.values():
                cursor[1] = max(cursor[1], min(request.consumer_from, cursor[0]))
        # Blocks it already holds in full (a hot hit) are hashed now, as if it had filled them.
        self.blocks.hash_full_blocks(request, min(request.cursors["target"]), self.prefixes.key)
        self.counters[found.cache] += 1
        encoder, consumer = request.cursors["target"]
        request.restore = {
            "cache": found.cache,
            "reused_positions": reused,
            "suffix_positions": n - reused,
            "encoder_rows": n - encoder,
            "consumer_rows": (n - max(consumer, request.consumer_from))
            * self.kv_models["target"].depth,
            "recovery_mode": cfg.recovery_mode,
            "reason": found.reason,
        }
        if cfg.cache_policy != "ttl":  # which blocks hit (ttl restores name their entry)
            request.restore["hit_blocks"] = list(found.blocks)
        self.log.emit("restore", request.request_id, **request.restore)

    # -- the verification budget and pool space ---------------------------------------------

    def budget(self, proposals: list[Proposal]) -> list[Scheduled]:
        """The nodes each request verifies, and blocks for them; deferred requests drop out."""
        cfg = self.config
        current = [[p.tree.path_probs[i] for i in range(1, len(p.tree))] for p in proposals]
        previous = [p.request.confidences for p in proposals]
        budget = choose_budget(
            current, previous, max_batch_tokens=cfg.max_batch_tokens, cost_curve=cfg.cost_curve
        )
        plans = [
            Scheduled(p, select_nodes(p.tree, length - 1), p.request)
            for p, length in zip(proposals, budget.per_request)
        ]
        self.log.emit(
            "budget",
            None,
            requests=[p.request.request_id for p in proposals],
            total=budget.total,
            per_request=list(budget.per_request),
            graph_size=budget.graph_size,
            expected_tokens=round(budget.expected_tokens, 6),
            estimated_cost=budget.estimated_cost,
            cost_source="synthetic cost curve" if cfg.cost_curve else "no cost curve",
        )
        reserved: set[int] = set()  # requests that already hold this round's space
        for plan in sorted(plans, key=lambda p: p.request.admitted):  # oldest gets space first
            if plan.request.admitted and self._reserve(plan, reserved):
                reserved.add(id(plan.request))
        return [plan for plan in plans if id(plan.request) in reserved]

    def _reserve(self, plan: Scheduled, reserved: set[int]) -> bool:
        """Get blocks for the plan's rows, shrinking its speculation to fit; False = deferred."""
        request, blocks = plan.request, self.blocks
        copies = blocks.copies(request)
        count, shared = blocks.blocks_needed(request, copies, len(plan.selected))
        free = blocks.free_count()
        if count > free:
            main, _ = blocks.blocks_needed(request, copies, 0)  # the pending position alone
            if main > free:
                if not self._make_room(main, reserved):
                    if request.admitted:  # not preempted itself: wait at the front of the queue
                        self.queue.appendleft(request.request_id)
                        self.log.emit(
                            "deferred",
                            request.request_id,
                            reason=f"needs {counted(main, 'free block')}; "
                            "space freed now is usable next round",
                        )
                    return False
                copies = blocks.copies(request)  # making room may have dropped holders
                free = blocks.free_count()
                count, shared = blocks.blocks_needed(request, copies, len(plan.selected))
            while plan.selected and count > free:
                plan.selected.pop()  # the deepest, most recently ranked node: still prefix-closed
                count, shared = blocks.blocks_needed(request, copies, len(plan.selected))
        blocks.take(request, count, shared)
        return True

    def _make_room(self, count: int, reserved: set[int]) -> bool:
        """True if `count` blocks are free now; else free space for the next round."""
        if count <= self.blocks.free_count():
            return True
        self.history.trim_for_space(count)
        if count <= self.blocks.free_count():
            return True
        # Space freed from now on is usable next round (this round may still be rewound).
        deficit = self.prefixes.evict_for(count - self.blocks.free_count())
        if deficit > 0:
            victims = [
                r
                for r in self.requests.values()
                if not r.finished and r.table and id(r) not in reserved
            ]
            if victims:
                self._preempt(max(victims, key=lambda r: r.admitted), count)
        return False

    def _preempt(self, request: Request, wanted: int) -> None:
        lost = min(request.cursor("target"))
        freed = self.blocks.release_all(request, rewritten=True)
        self.log.emit(
            "preempt",
            request.request_id,
            lost_positions=lost,
            freed_blocks=list(freed),
            reason=f"pool exhausted: another request needed {counted(wanted, 'block')}; "
            f"{request.request_id} was the most recently admitted",
        )
        request.cursors = {}
        request.admitted = 0
        request.restore = None  # it holds no rows: the next admission restores afresh
        request.status = Status.QUEUED
        request.preemptions += 1
        self.counters["preemptions"] += 1
        if request.request_id in self.queue:
            self.queue.remove(request.request_id)
        self.queue.appendleft(request.request_id)
