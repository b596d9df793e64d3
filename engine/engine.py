"""The request lifecycle: submit -> admit -> restore -> draft -> budget -> verify -> commit.

Each request keeps its committed tokens (prompt + generated). The last committed token is
*pending*: its rows are computed as the root of the next round's verification, so one target
forward per round both extends the committed state and checks the draft tree. The request's
`cursors[role]` say how many leading positions have stored rows in the pool: the encoder side
(encoder K/V, source, shared K/V) and the consumer side (local K/V, logits) separately, because
a warm restore has the first without the second.
"""

from __future__ import annotations

import hashlib
import itertools
import time
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .cache import CacheEntry, PrefixCache, counted
from .config import EngineConfig, RequestError, Result
from .draft import (
    ROOT,
    DraftTree,
    accept,
    best_nodes,
    choose_budget,
    expand,
    select_nodes,
    top_children,
)
from .kv import BlockPool, pool_blocks
from .model import State, TinyModel, is_integer, length_groups
from .rows import BatchContext, FinishedRows, RowBatchItem, Rows, Stored

Event = dict[str, Any]


@dataclass(eq=False)
class Request:
    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    eos_id: int | None
    tokens: list[int]
    status: str = "queued"  # queued | running | finished
    finish_reason: str | None = None
    error: str | None = None
    table: list[int] = field(default_factory=list)
    cursors: dict[str, list[int]] = field(default_factory=dict)  # role -> [encoder, consumer]
    admitted: int = 0  # admission order; 0 = holds no rows
    fresh: bool = False  # admitted this round: publish its prefix after the round
    local_lower: int = 0
    consumer_from: int = 0
    restore: dict[str, Any] | None = None
    accepted: int = 0
    proposed: int = 0
    confidences: list[float] = field(default_factory=list)
    tree: dict[str, Any] | None = None
    last_commit: dict[str, Any] | None = None
    final: FinishedRows | None = None  # what committed_state reads, copied out at finish
    preemptions: int = 0
    hashed: int = 0  # leading blocks whose prefix hash is set
    # The models' identities its KV and generated tokens came from (None: nothing computed).
    identities: dict[str, str] | None = None
    # The table this map was made for, and the slot of every position it covers (an int: the
    # first slot, when the blocks are consecutive). Rebuilt only when the table changes.
    slot_map: tuple[list[int], np.ndarray | int] | None = None

    @property
    def generated(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def remaining(self) -> int:
        return self.max_tokens - self.generated

    def copy(self, tokens: list[int] | None = None) -> Request:
        """A copy that shares nothing mutable, but for `tokens` if given."""
        other = object.__new__(Request)
        other.__dict__.update(self.__dict__)
        other.tokens = list(self.tokens) if tokens is None else tokens
        other.table = list(self.table)
        other.cursors = {role: list(c) for role, c in self.cursors.items()}
        other.confidences = list(self.confidences)
        return other


@dataclass(eq=False)
class _Checkpoint:
    """Everything step() may change, taken before it runs (arrays by reference, not copied)."""

    tick: int
    requests: dict[str, Request]
    queue: list[str]
    order: list[str]
    delivered: set[str]
    cache: PrefixCache
    counters: dict[str, int]
    trace_length: int
    # Unfinished requests' copies share their token lists with the live requests: a list is
    # only ever appended to (a rollback gives its request a new one), so the first `lengths`
    # tokens stay what they were. Copying each history at every round cost 17 KB per
    # 2000-token request per round of undo history.
    lengths: dict[str, int]
    refcount: np.ndarray
    free: np.ndarray
    block_hash: list[str | None]
    sealed: np.ndarray
    admissions: int
    released_after: list[int] = field(default_factory=list)


@dataclass(eq=False)
class _Plan:
    """One admitted request's work in the current round."""

    request: Request
    tree: DraftTree
    draft_rows: dict[int, int] = field(default_factory=dict)  # tree node -> draft row index
    draft_item: RowBatchItem | None = None
    # Each draft level's rows, joined only when read (the last level's usually never are).
    draft_parts: list[Rows] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    item: RowBatchItem | None = None
    frontier: list[int] = field(default_factory=list)  # newest draft nodes, to expand next
    draft_replay: int = 0  # leading draft rows that were consumer-only replays
    target_rows: dict[int, int] = field(default_factory=dict)  # tree node -> target row
    base_item: RowBatchItem | None = None  # the target's catch-up rows, built once a round
    slots: np.ndarray | None = None  # pool slots of the target rows computed this round

    @property
    def draft_out(self) -> Rows | None:
        """Every draft row computed this round, in order (None before the first level)."""
        parts = self.draft_parts
        if len(parts) > 1:
            parts[:] = [Rows.concat(parts)]
        return parts[0] if parts else None


_ENGINE_SERIALS = itertools.count()

MAX_REQUEST_ID_LENGTH = 64  # characters: ids are table columns, titles and file contents
# Control, format (bidi overrides, zero-width), surrogate and line/paragraph separators: each
# garbles a terminal line or an export, or cannot be encoded at all.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _shown(value: object) -> str:
    """repr() of a value for an error message, cut short (a bad id may be huge)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def label_problem(label: object, max_length: int) -> str | None:
    """Why `label` cannot name something shown on a line (None if it can): it must be a
    non-empty string of at most `max_length` characters, none of them unprintable. The
    problem reads after the label's own name ("request_id must be ...")."""
    if not isinstance(label, str) or not label.strip():
        return f"must be a non-empty string, got {_shown(label)}"
    if len(label) > max_length:
        return f"{_shown(label)} has {len(label)} characters; at most {max_length} are allowed"
    for char in label:
        if unicodedata.category(char) in _UNPRINTABLE:
            return (
                f"{_shown(label)} contains U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
                + ": control, format, surrogate and line-separator characters are not allowed"
            )
    return None


def check_request_id(request_id: object) -> str:
    """Return `request_id` if it is a usable request id; else raise ValueError saying why."""
    problem = label_problem(request_id, MAX_REQUEST_ID_LENGTH)
    if problem is not None:
        raise ValueError(f"request_id {problem}")
    return str(request_id)  # label_problem checked it is one


class Engine:
    """A paged, prefix-caching, speculative inference engine over TinyModel."""

    def __init__(
        self,
        target: TinyModel | None = None,
        draft: TinyModel | None = None,
        *,
        config: EngineConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.target = target if target is not None else TinyModel()
        self.draft = draft
        for role, model in (("target", self.target), ("draft", draft)):
            if model is not None and not isinstance(model, TinyModel):
                raise ValueError(f"{role} must be a TinyModel, got {type(model).__name__}")
        self.config = config if config is not None else EngineConfig()
        if not isinstance(self.config, EngineConfig):
            raise ValueError("config must be an EngineConfig")
        if draft is not None and draft.vocab_size != self.target.vocab_size:
            raise ValueError("target and draft must share a vocabulary")
        if self.config.recovery_mode != "exact":
            for model in self.models.values():
                if model.window > self.config.keep:
                    raise ValueError(
                        f"keep={self.config.keep} must cover the local window ({model.window})"
                    )
        if clock is None:
            start = time.monotonic()
            self._clock: Callable[[], float] = lambda: time.monotonic() - start
        elif not callable(clock):
            raise ValueError("clock must be a callable returning seconds")
        else:
            self._clock = clock
        # An early-exit draft computes exactly the target's rows for committed positions, so it
        # reads the target's KV; any other draft keeps its own rows in the same blocks.
        self.draft_reads_target = draft is not None and draft.is_early_exit_of(self.target)
        self.kv_models = {"target": self.target}
        if draft is not None and not self.draft_reads_target:
            self.kv_models["draft"] = draft
        self.pool = BlockPool(
            self.kv_models,
            num_blocks=pool_blocks(self.config, self.target, draft),
            block_size=self.config.block_size,
        )
        self.cache = PrefixCache(capacity=self.config.cache_capacity)
        self.requests: dict[str, Request] = {}
        self._order: list[str] = []  # finish order (run() delivers in submission order)
        self._delivered: set[str] = set()
        self._queue: deque[str] = deque()
        self._history: deque[_Checkpoint] = deque()
        # A finished request never changes (rollback replaces it with a copy), so its view is
        # built once: request id -> (the request, whether it committed this round, the view).
        self._finished_views: dict[str, tuple[Request, bool, dict[str, Any]]] = {}
        self._trimmed_for_space = 0  # history entries the current round trimmed to make room
        self._round_context: tuple[tuple[int, ...], BatchContext] | None = None
        # Models keep padded copies of stored rows across calls, keyed by `_context_key`:
        # the key changes whenever a request's committed rows may have been rewritten.
        self._serial = next(_ENGINE_SERIALS)
        self._rewrites = 0
        self._admissions = 0
        # The models' identities at the last check for replaced weights (None: check again).
        self._checked_identities: dict[str, str] | None = None
        self.trace: list[Event] = []
        self.tick = 0
        self.counters = dict.fromkeys(
            (
                "hot",
                "warm",
                "cold",
                "proposed",
                "accepted",
                "verified",
                "target_forwards",
                "draft_forwards",
                "encoder_rows",
                "consumer_rows",
                "draft_rows",
                "preemptions",
                "evictions",
                "committed_tokens",
                "rolled_back_positions",
            ),
            0,
        )

    # -- public API -------------------------------------------------------------------------

    @property
    def models(self) -> dict[str, TinyModel]:
        models = {"target": self.target}
        if self.draft is not None:
            models["draft"] = self.draft
        return models

    def now(self) -> float:
        reading = self._clock()
        # Any real number (Fraction, Decimal, a 0-d array too); not text, a truth value or a
        # sequence, which float() would take or fail on without naming the clock.
        unreadable = isinstance(reading, (str, bytes, bool, np.bool_)) or (
            isinstance(reading, np.ndarray) and reading.ndim != 0
        )
        try:
            value = float(reading)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            unreadable = True
        if unreadable:
            raise ValueError(f"clock must return a number of seconds, got {reading!r}")
        if not np.isfinite(value):
            raise ValueError(f"clock returned a non-finite time {value!r}")
        return value

    def submit(
        self,
        prompt: object,
        *,
        max_tokens: int = 16,
        eos_id: int | None = None,
        request_id: str | None = None,
    ) -> str:
        """Queue a request; validates everything before changing anything."""
        tokens = self.target.check_tokens(prompt, "prompt")
        if not is_integer(max_tokens) or max_tokens < 0:
            raise ValueError(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
        max_tokens = int(max_tokens)
        eos_id = self.target.check_eos_id(eos_id)
        if request_id is None:
            number = len(self.requests) + 1
            while f"request-{number}" in self.requests:
                number += 1
            request_id = f"request-{number}"
        request_id = check_request_id(request_id)  # a str, even from a NumPy string
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        positions = len(tokens) + max_tokens
        blocks = -(-positions // self.config.block_size)
        if blocks > self.pool.num_blocks:
            setting = "num_blocks" if self.config.num_blocks else "kv_cache_memory_mib"
            raise ValueError(
                f"request needs {blocks} blocks ({len(tokens)} prompt + {max_tokens} new "
                f"positions) but the pool has only {self.pool.num_blocks}: raise {setting}"
            )
        request = Request(request_id, tokens, max_tokens, eos_id, list(tokens))
        self.requests[request_id] = request
        self._queue.append(request_id)
        self._emit("queued", request_id, prompt_positions=len(tokens), max_tokens=max_tokens)
        return request_id

    def cancel(self, request_id: str) -> bool:
        """Finish a queued or running request as cancelled; False if it had already finished."""
        request = self._get(request_id)
        if request.status == "finished":
            return False
        self._finish(request, "cancelled")
        return True

    def result(self, request_id: str) -> Result:
        request = self._get(request_id)
        if request.status != "finished":
            raise ValueError(f"request {request_id!r} has not finished (it is {request.status})")
        return self._result(request)

    def run(self, *, max_steps: int | None = None, raise_on_error: bool = True) -> list[Result]:
        """Step until idle; return the results not returned before (each delivered once), in
        the order their requests were submitted."""
        if max_steps is not None and (not is_integer(max_steps) or max_steps < 0):
            raise ValueError(f"max_steps must be None or a non-negative integer, got {max_steps!r}")
        steps = 0
        while self._queue and (max_steps is None or steps < max_steps):
            self.step()
            steps += 1
        # Submission order (the order of `requests`), as vLLM's LLM.generate and the reference
        # return them, so results pair with their prompts; step()'s events keep real order.
        finished = set(self._order)
        fresh = [key for key in self.requests if key in finished and key not in self._delivered]
        self._delivered.update(fresh)
        results = [self._result(self.requests[key]) for key in fresh]
        if raise_on_error and any(r.finish_reason == "error" for r in results):
            raise RequestError(results)
        return results

    def generate(
        self, prompt: object, *, max_tokens: int = 16, eos_id: int | None = None
    ) -> Result:
        """Submit one prompt and step until it finishes. Its result is delivered here (run()
        will not return it again); other requests' results wait for run(). Raises
        RequestError if this request failed."""
        request_id = self.submit(prompt, max_tokens=max_tokens, eos_id=eos_id)
        while self.requests[request_id].status != "finished":
            if not self._queue:  # cannot happen: a request leaves the queue only finished
                raise RuntimeError(f"{request_id} stopped before it finished")
            self.step()
        self._delivered.add(request_id)
        result = self.result(request_id)
        if result.finish_reason == "error":
            raise RequestError([result])
        return result

    @property
    def idle(self) -> bool:
        return not self._queue

    @property
    def undo_available(self) -> int:
        return len(self._history)

    def metrics(self) -> dict[str, dict[str, int]]:
        counts = self.pool.counts(self._cache_only_blocks())
        c = self.counters
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
                "target_forwards": c["target_forwards"],
                "draft_forwards": c["draft_forwards"],
                "encoder_rows": c["encoder_rows"],
                "consumer_rows": c["consumer_rows"],
                "draft_rows": c["draft_rows"],
            },
            "requests": {
                # Unfinished requests are exactly the queue; finished ones, the finish order.
                "queued": sum(self.requests[i].status == "queued" for i in self._queue),
                "running": sum(self.requests[i].status == "running" for i in self._queue),
                "finished": len(self._order),
                "committed_tokens": c["committed_tokens"],
                "preemptions": c["preemptions"],
                "evictions": c["evictions"],
                "rolled_back_positions": c["rolled_back_positions"],
            },
        }

    def pending_positions(self) -> int:
        """Rows the next round computes before its first token, at most: those not stored
        yet of the requests it would admit, for each model that stores rows (a cached prefix
        may cover part of a new prompt). A viewer can tell a long prefill from a decode step
        before running it."""
        cap = self._batch_cap()
        resident = self._resident()
        total = taken = 0
        for request_id in self._queue:  # admitted as `_admit` does, without admitting
            request = self.requests[request_id]
            if taken == cap:
                break
            if request.status != "running":
                if resident >= self.config.max_active:
                    continue
                resident += 1
            taken += 1
            missing = {
                role: len(request.tokens)
                - (min(self._cursor(request, role)) if request.table else 0)
                for role in self.kv_models
            }
            total += missing["target"]
            if missing["target"] <= 1:  # a draft of its own catches up once the target has
                total += missing.get("draft", 0)
        return total

    def committed_state(self, request_id: str) -> State:
        """The request's committed arrays, comparable with the oracle's `.state`."""
        request = self._get(request_id)
        if request.identities is not None and request.identities != self._identities():
            raise ValueError(
                f"request {request_id!r} computed its rows with weights since replaced: its "
                "committed state would need a forward of the old model"
            )
        tokens = tuple(request.tokens)
        n = len(tokens)
        if request.final is not None:
            stored = request.final.rows()
            cursor = len(stored)
        else:
            cursor = min(self._cursor(request, "target")) if request.table else 0
            stored = self._rows(request, "target", 0, cursor)
        if cursor == n:  # a zero-token request computed every row of its prompt
            return self.target.state_of(tokens, stored)
        window = self.target.window
        local_start = max(0, cursor - window + 1, request.consumer_from)
        item = RowBatchItem(
            context=stored,
            local=stored.take(slice(local_start, cursor)),
            local_positions=np.arange(local_start, cursor),
            tokens=np.array(tokens[cursor:]),
            positions=np.arange(cursor, n),
            parents=np.arange(n - cursor) - 1,
            local_lower=request.local_lower,
            consumer_from=request.consumer_from,
        )
        (new,) = self.target.compute_rows([item])
        return self.target.state_of(tokens, Rows.concat([stored, new]))

    def rollback(self, request_id: str, tokens: int = 1) -> list[int]:
        """Remove the request's last `tokens` generated tokens (clamped); returns them.

        Its rows, blocks and the draft's cursor return to the shorter prefix; a finished
        request is reopened and queued again. Cancelled or failed requests cannot roll back.
        """
        request = self._get(request_id)
        if not is_integer(tokens) or tokens < 1:
            raise ValueError(f"tokens must be a positive integer, got {tokens!r}")
        tokens = int(tokens)
        if request.finish_reason in ("cancelled", "error"):
            raise ValueError(
                f"request {request_id!r} finished as {request.finish_reason}; it cannot roll back"
            )
        count = min(tokens, request.generated)
        removed = request.tokens[len(request.tokens) - count :] if count else []
        freed: list[int] = []
        if count:
            if request.status == "finished":
                request = request.copy()  # finished objects are shared with the history
                self.requests[request_id] = request
                self._finished_views.pop(request_id, None)  # it would keep the old object
                request.status, request.finish_reason, request.error = "queued", None, None
                request.final = None
                request.restore = None  # it holds no rows: the next admission restores afresh
                self._checked_identities = None  # its tokens may predate a weight change
                self._order.remove(request_id)
                self._delivered.discard(request_id)
                self._queue.append(request_id)
            # A new list: undo checkpoints share the old one (see _Checkpoint.lengths).
            request.tokens = request.tokens[: len(request.tokens) - count]
            # "committed" counts the tokens requests hold now (the header shows it): these left.
            self.counters["committed_tokens"] -= count
            freed = self._truncate(request, len(request.tokens) - 1)
            request.tree = None
            request.last_commit = None
        self._emit("rollback", request_id, removed=removed, freed_blocks=freed)
        return removed

    def _truncate(self, request: Request, cursor: int) -> list[int]:
        """Forget rows at and after `cursor`; returns the blocks released."""
        self._rewrites += 1
        if not request.table:
            return []
        size = self.config.block_size
        for role in request.cursors:
            request.cursors[role] = [min(c, cursor) for c in request.cursors[role]]
        keep = -(-cursor // size)
        request.hashed = min(request.hashed, cursor // size)
        freed = request.table[keep:]
        self.pool.release(freed)
        del request.table[keep:]
        # The kept tail block's later rows stay sealed: the next write there goes to a copy,
        # so the undo history and any cache entry keep what they saw.
        return freed

    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable view of the whole engine, for viewers and exports."""
        now = self.now()
        states = self._block_states()
        refcounts = self.pool.refcount.tolist()  # plain ints, read once (viewers call this often)
        requests = [self._request_view(r, states, refcounts) for r in self.requests.values()]
        dropped_now = {block for view in requests for block in view["dropped_blocks"]}
        pool_blocks = []
        for block, (count, digest) in enumerate(zip(refcounts, self.pool.block_hash)):
            state = states.get(block, "free")
            if state == "free" and block in dropped_now:
                state = "dropped"
            pool_blocks.append({"id": block, "state": state, "refcount": count, "hash": digest})
        metrics = self.metrics()
        verified = metrics["drafts"]["verified"]
        return {
            "tick": self.tick,
            "clock": now,
            "idle": self.idle,
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
            "queue": list(self._queue),
            "pool": {
                "num_blocks": self.pool.num_blocks,
                "block_size": self.config.block_size,
                "blocks": pool_blocks,
            },
            "cache": [
                {
                    "tokens": list(entry.tokens),
                    "blocks": list(entry.blocks),
                    "state": entry.state(now),
                    "hot_until": entry.hot_until,
                    "warm_until": entry.warm_until,
                }
                for _, entry in self.cache.items()
            ],
            "requests": requests,
            "undo": {"available": len(self._history), "depth": self.config.undo_depth},
        }

    def _block_states(self) -> dict[int, str]:
        states: dict[int, str] = {}
        for request_id in self._queue:  # between rounds, the queue is every unfinished request
            for block in self.requests[request_id].table:
                states[block] = "shared" if self.pool.refcount[block] > 1 else "committed"
        for block in self.cache.blocks():
            states.setdefault(block, "cached")
        for retained in np.flatnonzero(~self.pool.free & (self.pool.refcount == 0)):
            states.setdefault(int(retained), "retained")
        return states

    def _request_view(
        self, request: Request, states: dict[int, str], refcounts: list[int]
    ) -> dict[str, Any]:
        """The request's part of snapshot(). A finished request's view is shared by every
        snapshot until it changes (viewers read views, never write them)."""
        if request.status != "finished":
            return self._build_request_view(request, states, refcounts)
        commit = request.last_commit
        this_round = commit is not None and commit["round"] == self.tick
        kept = self._finished_views.get(request.request_id)
        if kept is not None and kept[0] is request and kept[1] == this_round:
            return kept[2]
        view = self._build_request_view(request, states, refcounts)
        self._finished_views[request.request_id] = (request, this_round, view)
        return view

    def _build_request_view(
        self, request: Request, states: dict[int, str], refcounts: list[int]
    ) -> dict[str, Any]:
        size = self.config.block_size
        cursor = min(self._cursor(request, "target")) if request.table else 0
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
                    "hash": self.pool.block_hash[block] if index < request.hashed else None,
                }
            )
        commit = request.last_commit
        this_round = commit is not None and commit["round"] == self.tick
        finished = request.status == "finished"
        return {
            "id": request.request_id,
            "status": request.status,
            "finish_reason": request.finish_reason,
            "error": request.error,
            "prompt": list(request.prompt),
            "generated": request.tokens[len(request.prompt) :],
            "max_tokens": request.max_tokens,
            "eos_id": request.eos_id,
            "pending_token": request.tokens[-1],
            "committed_positions": cursor,
            # Stored positions the pending token's local attention reads (it sees itself too).
            "window": [max(0, cursor - self.target.window + 1), cursor],
            "restore": request.restore,
            "accepted": request.accepted,
            "proposed": request.proposed,
            "preemptions": request.preemptions,
            "blocks": blocks,
            "dropped_blocks": list(commit["dropped_blocks"]) if this_round and commit else [],
            "last_commit": commit,
            "tree": request.tree,
            "can_cancel": not finished,
            "can_rollback": request.generated > 0
            and request.finish_reason not in ("cancelled", "error"),
        }

    # -- one round --------------------------------------------------------------------------

    def step(self) -> list[Event]:
        """Run one round; returns its events. Interrupts leave the engine as it was."""
        # Everything that can raise (an interrupt lands anywhere) is inside the try, taking
        # and recording the checkpoint included: the handler must see any partial work.
        history = list(self._history)
        self._trimmed_for_space = 0
        writes = self.pool.writes
        checkpoint: _Checkpoint | None = None
        start = len(self.trace)
        try:
            checkpoint = self._checkpoint()
            self._history.append(checkpoint)
            self._resume_retention()
            self._round()
            self._trim_history(self.config.undo_depth)
            events = self.trace[start:]
        except BaseException as failure:
            self._abort(history, checkpoint, failure, wrote=self.pool.writes != writes)
            raise
        return events

    def _abort(
        self,
        history: list[_Checkpoint],
        checkpoint: _Checkpoint | None,
        failure: BaseException,
        *,
        wrote: bool,
    ) -> None:
        """Put back the engine `step()` found, but for one `step_aborted` event."""
        # An interrupt can land after a forward wrote non-finite rows into a model's work
        # buffers and before the round checked them: forget the buffers with the round.
        self._reset_work_buffers()
        if checkpoint is not None:
            self._restore(checkpoint)
        # Every entry comes back, with its retained blocks as the checkpoint saw them, unless
        # the round wrote rows after trimming entries for space: their blocks may hold them.
        trimmed = self._trimmed_for_space if wrote else 0
        self._history = deque(history[trimmed:])
        self._after_rewind()
        self._emit("step_aborted", None, error_type=type(failure).__name__)

    def _round(self) -> None:
        self._round_context = None
        self.tick += 1
        now = self.now()
        self._fail_stale_requests(now)
        for entry in self.cache.expire(now):
            self._drop_entry(entry, "expired")
        batch = self._admit(now)
        if not batch:
            return
        plans = [_Plan(r, DraftTree.rooted(r.tokens[-1])) for r in batch]
        if self.draft is not None:
            self._grow_trees(plans)
            plans = [p for p in plans if p.request.status != "finished"]
            if not plans:
                return
        plans = self._plan_verification(plans)
        if not plans:
            return
        self._verify_and_commit(plans, now)

    def _identities(self) -> dict[str, str]:
        return {role: model.identity for role, model in self.models.items()}

    def _fail_stale_requests(self, now: float) -> None:
        """A model whose weights were replaced never extends KV or tokens computed with the
        old ones: such requests fail, and cached prefixes of the old weights are dropped
        (their keys could never match again). Requests that computed nothing yet go on."""
        current = self._identities()
        if current == self._checked_identities:
            return  # the usual round: nothing changed since the last check
        for request_id in list(self._queue):
            request = self.requests[request_id]
            if request.identities is None or request.identities == current:
                continue
            changed = ", ".join(
                f"the {role} model's weights changed (identity {old} -> {current[role]})"
                for role, old in request.identities.items()
                if current[role] != old
            )
            self._finish(request, "error", f"{changed} after this request's KV was computed")
        key = self._cache_key()
        for entry in self.cache.remove_other_keys(key):
            self._drop_entry(entry, "model changed")
        self._checked_identities = current

    def _batch_cap(self) -> int:
        cap = min(self.config.max_active, self.config.max_batch_tokens)
        if self.config.cost_curve:
            cap = min(cap, self.config.cost_curve[-1][0])
        return cap

    def _resident(self) -> int:
        """Requests holding KV now. Every running request is queued between rounds: counted
        there, not over every request ever submitted (finished ones pile up)."""
        return sum(self.requests[i].status == "running" for i in self._queue)

    def _admit(self, now: float) -> list[Request]:
        cap = self._batch_cap()
        batch: list[Request] = []
        # At most max_active requests hold KV at once: one that is not running yet waits for a
        # place (in its queue position), or round-robin would admit every queued request in
        # turn, run the pool dry and preempt the newest forever while the oldest starve.
        resident = self._resident()
        waiting: list[str] = []
        while self._queue and len(batch) < cap:
            request_id = self._queue.popleft()
            request = self.requests[request_id]
            if request.status == "finished":
                continue
            if request.status != "running":
                if resident >= self.config.max_active:
                    waiting.append(request_id)
                    continue
                resident += 1
            if request.admitted == 0:
                self._restore_prefix(request, now)
            request.status = "running"
            batch.append(request)  # a zero-token request too: it computes its prompt
        self._queue.extendleft(reversed(waiting))
        return batch

    def _restore_prefix(self, request: Request, now: float) -> None:
        """Attach the longest usable cached prefix to a request that holds no rows."""
        self._admissions += 1
        request.admitted = self._admissions
        request.fresh = True
        wanted = tuple(request.tokens[:-1])
        exact = self.config.recovery_mode == "exact"
        found = self.cache.lookup(self._cache_key(), wanted, now=now, exact=exact)
        reused = found.reused
        if found.entry is not None:
            blocks = found.entry.blocks[: -(-reused // self.config.block_size)]
            self.pool.hold(blocks)
            request.table = list(blocks)
            if request.identities is None:  # its rows now come from these weights
                request.identities = self._identities()
        consumer = reused if found.cache == "hot" else 0
        request.cursors = {role: [reused, consumer] for role in self.kv_models}
        n = len(request.tokens)
        bounded = self.config.recovery_mode != "exact" and found.cache != "hot"
        request.local_lower = max(0, n - self.config.keep) if bounded else 0
        request.consumer_from = request.local_lower if self.config.recovery_mode == "compact" else 0
        if bounded:
            for cursor in request.cursors.values():
                cursor[1] = max(cursor[1], min(request.consumer_from, cursor[0]))
        # Blocks it already holds in full (a hot hit) are hashed now, as if it had filled them.
        self._hash_full_blocks(request, min(request.cursors["target"]))
        self.counters[found.cache] += 1
        encoder, consumer = request.cursors["target"]
        request.restore = {
            "cache": found.cache,
            "reused_positions": reused,
            "suffix_positions": n - reused,
            "encoder_rows": n - encoder,
            "consumer_rows": (n - max(consumer, request.consumer_from)) * self.target.depth,
            "recovery_mode": self.config.recovery_mode,
            "reason": found.reason,
        }
        self._emit("restore", request.request_id, **request.restore)

    # -- drafting -----------------------------------------------------------------------------

    def _grow_trees(self, plans: list[_Plan]) -> None:
        """Grow each request's draft tree one level per batched draft forward.

        Level 0 catches the draft up to the root (prefill, replay or just the pending token);
        every later level computes the rows of the nodes chosen for expansion. The stored
        context is padded once and shared by all levels.
        """
        assert self.draft is not None
        cfg = self.config
        # A round that still computes the prompt (or replays it) verifies only its main position:
        # drafting then would repeat the prefill in the draft model for little gain.
        # Grow no more than the round can verify: a request's fair share of the extra positions
        # bounds its depth, twice that its nodes (a 64-request round drafts one level, not four).
        if cfg.max_batch_tokens <= len(plans):
            return  # no position is left to verify a draft with: drafting would be wasted
        share = max(1, cfg.max_batch_tokens // len(plans) - 1)
        node_cap = min(cfg.max_draft_nodes, 2 * share)
        depth_cap = min(cfg.draft_width, share)
        active = [
            p
            for p in plans
            if min(depth_cap, p.request.remaining - 1) > 0
            and self._cursor(p.request, "target") == [len(p.request.tokens) - 1] * 2
        ]
        if not active:
            return
        role = "target" if self.draft_reads_target else "draft"
        items = [self._draft_item(plan.request, role) for plan in active]
        # Room for every row this round can add, so later levels never regrow the context.
        tail = max(len(item.tokens) for item in items) + node_cap + 1
        context: BatchContext | None
        if len(length_groups(items)) > 1:
            context = None  # very different lengths: each forward pads its groups apart
        elif self.draft_reads_target and self.config.draft_context is None:
            # The draft reads exactly the target's stored rows: pad them once for both models
            # (the draft sees the first layer's local columns of the same array).
            shared = self.target.batch_context(items, tail=tail)
            self._round_context = (tuple(id(plan) for plan in active), shared)
            for plan, item in zip(active, items):
                plan.base_item = item
            layer = 2 * self.draft.width * self.draft.depth
            local_room = None if shared.local_room is None else shared.local_room[..., :layer]
            context = replace(shared, local=shared.local[..., :layer], local_room=local_room)
        else:
            context = self.draft.batch_context(items, tail=tail)
        outputs, logits = self._draft_outputs(active, items, context)
        expanding = []
        for plan, item, out in zip(active, items, outputs):
            plan.draft_item, plan.draft_parts = item, [out]
            plan.draft_replay = item.replay
            plan.draft_rows[ROOT] = len(out) - 1
            self.counters["draft_rows"] += len(out)
            expanding.append([ROOT] if len(out) else [])
        if logits is None:
            last_rows = np.concatenate([out.logits[-1:] for out in outputs])
        else:  # every plan's last row, out of the forward's one array
            last_rows = logits[np.cumsum([len(out) for out in outputs]) - 1]
        self._expand_level(active, expanding, last_rows, node_cap)
        for depth in range(1, depth_cap):
            expanding = []
            for plan in active:
                if plan.request.status == "finished":  # its draft failed this round
                    expanding.append([])
                    continue
                room = len(plan.tree) - 1 < node_cap
                deep_enough = depth < min(depth_cap, plan.request.remaining - 1)
                chosen = best_nodes(plan.tree, plan.frontier, cfg.draft_branching)
                expanding.append(chosen if room and deep_enough else [])
            if not any(expanding):
                break
            items = [self._level_item(plan, nodes, depth) for plan, nodes in zip(active, expanding)]
            outputs, logits = self._draft_outputs(active, items, context)
            for index, (plan, item, out) in enumerate(zip(active, items, outputs)):
                if plan.request.status == "finished":  # its draft failed: no rows, no children
                    expanding[index] = []
                nodes = expanding[index]
                if not nodes:
                    continue
                base = sum(len(part) for part in plan.draft_parts)
                for offset, node in enumerate(nodes):
                    plan.draft_rows[node] = base + offset
                plan.draft_item = item
                plan.draft_parts.append(out)
                self.counters["draft_rows"] += len(nodes)
            if logits is None:
                logits = np.concatenate([out.logits for out in outputs])
            self._expand_level(active, expanding, logits, node_cap)
        for plan in active:
            if plan.request.status == "finished":
                continue
            proposed = len(plan.tree) - 1
            plan.request.proposed += proposed
            self.counters["proposed"] += proposed
            self._emit("draft", plan.request.request_id, **plan.tree.to_dict())

    def _draft_outputs(
        self, plans: list[_Plan], items: list[RowBatchItem], context: BatchContext | None
    ) -> tuple[list[Rows], np.ndarray | None]:
        """A draft forward; a request whose draft fails finishes with an error (its rows are
        replaced by empty ones so the batch keeps its shape for the next level). Also returns
        the logits of every row, plan after plan, when all plans succeeded (None otherwise)."""
        assert self.draft is not None
        outputs, flat = self._forward_isolated(self.draft, items, context)
        self.counters["draft_forwards"] += 1
        rows = []
        for plan, out in zip(plans, outputs):
            if isinstance(out, Exception):
                if plan.request.status != "finished":
                    self._finish(plan.request, "error", f"draft {type(out).__name__}: {out}")
                out = Rows.empty(self.draft.layout, 0)
            rows.append(out)
        return rows, None if flat is None else flat[:, self.draft.layout.logits]

    def _expand_level(
        self, plans: list[_Plan], expanding: list[list[int]], logits: np.ndarray, cap: int
    ) -> None:
        """Add children to every expanded node of every plan (one softmax/top-k for all);
        `logits` holds one row per expanded node, plan after plan."""
        cfg = self.config
        probabilities, top = top_children(logits, cfg.draft_branching)
        row = 0
        for plan, nodes in zip(plans, expanding):
            count = len(nodes)  # each expanded node contributed one row of logits
            plan.frontier = expand(
                plan.tree,
                nodes,
                probabilities[row : row + count],
                top[row : row + count],
                cap,
            )
            row += count

    def _level_item(self, plan: _Plan, nodes: list[int], depth: int) -> RowBatchItem:
        """The draft rows of `nodes` (all at `depth`), attending to this round's earlier rows."""
        item, tree = plan.draft_item, plan.tree
        assert item is not None and plan.draft_out is not None
        if plan.request.status == "finished":  # its draft failed: a placeholder with no rows
            empty = np.zeros(0, dtype=np.int64)
            return replace(item, tokens=empty, positions=empty, parents=empty, replay=0)
        position = len(plan.request.tokens) - 1 + depth
        # Few NumPy calls (this runs per request per level): the new rows' three fields are
        # rows of one array, the earlier rows' positions and parents halves of another.
        new = np.array(
            [
                [tree.tokens[n] for n in nodes],
                [position] * len(nodes),
                [plan.draft_rows[tree.parents[n]] for n in nodes],
            ],
            dtype=np.int64,
        )
        if len(item.earlier_positions):
            earlier = np.concatenate(
                [item.earlier_positions, item.positions, item.earlier_parents, item.parents]
            )
            count = len(earlier) // 2
            earlier_positions, earlier_parents = earlier[:count], earlier[count:]
        else:  # after the first level, its rows are the earlier rows as they stand
            earlier_positions, earlier_parents = item.positions, item.parents
            count = len(earlier_positions)
        # Only the first level's rows can be replays, and they lead it.
        replay = plan.draft_replay
        full = np.arange(count) >= replay if replay else np.ones(count, dtype=bool)
        return RowBatchItem(
            context=item.context,
            local=item.local,
            local_positions=item.local_positions,
            tokens=new[0],
            positions=new[1],
            parents=new[2],
            replay=0,
            local_lower=item.local_lower,
            consumer_from=item.consumer_from,
            earlier=plan.draft_out,
            earlier_positions=earlier_positions,
            earlier_parents=earlier_parents,
            earlier_full=full,
            # The first level's stored rows: a level padded apart (length groups, no shared
            # context) keeps them instead of copying the whole history again.
            context_key=item.context_key,
        )

    def _catch_up_item(self, request: Request, role: str) -> RowBatchItem:
        """Rows from the role's cursor to the pending token (replay rows first)."""
        encoder, consumer = self._cursor(request, role)
        n = len(request.tokens)
        window = self.kv_models[role].window
        local_start = min(max(0, consumer - window + 1, request.consumer_from), consumer)
        return RowBatchItem(
            context=self._stored(request, role, 0, encoder),
            local=self._stored(request, role, local_start, consumer),
            local_positions=np.arange(local_start, consumer),
            tokens=np.array(request.tokens[consumer:]),
            positions=np.arange(consumer, n),
            parents=np.arange(-1, n - consumer - 1),
            replay=encoder - consumer,
            local_lower=request.local_lower,
            consumer_from=request.consumer_from,
            context_key=(self._serial, request.request_id, role, request.admitted, self._rewrites),
        )

    def _draft_item(self, request: Request, role: str) -> RowBatchItem:
        """The draft's first rows; with `draft_context` set, it sees only that many of the most
        recent stored positions (a proposal may be approximate; verification is exact)."""
        item = self._catch_up_item(request, role)
        limit, context = self.config.draft_context, item.context
        if limit is None or item.replay or len(context) <= limit or not isinstance(context, Stored):
            return item
        index = context.index
        skip = len(context) - limit
        index = slice(index.start + skip, index.stop) if isinstance(index, slice) else index[skip:]
        return replace(item, context=Stored(context.store, index), context_key=None)

    # -- budget and pool space ----------------------------------------------------------------

    def _plan_verification(self, plans: list[_Plan]) -> list[_Plan]:
        cfg = self.config
        current = [[plan.tree.path_probs[i] for i in range(1, len(plan.tree))] for plan in plans]
        previous = [plan.request.confidences for plan in plans]
        budget = choose_budget(
            current, previous, max_batch_tokens=cfg.max_batch_tokens, cost_curve=cfg.cost_curve
        )
        for plan, length in zip(plans, budget.per_request):
            plan.selected = select_nodes(plan.tree, length - 1)
        self._emit(
            "budget",
            None,
            requests=[p.request.request_id for p in plans],
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

    def _copies_needed(self, request: Request) -> list[int]:
        """Indices of the request's blocks whose later rows it will write but someone else may
        read: copy them first."""
        firsts = {role: cursor[1] for role, cursor in request.cursors.items()}
        return self.pool.blocks_to_copy(request.table, firsts)

    def _blocks_for(self, request: Request, copies: list[int], nodes: int) -> tuple[int, list[int]]:
        """Blocks to take for `nodes` speculative rows after the pending one, and which of the
        table's blocks those rows reach that must be copied first."""
        needed = -(-(len(request.tokens) + nodes) // self.config.block_size)
        shared = [index for index in copies if index < needed]
        return max(0, needed - len(request.table)) + len(shared), shared

    def _reserve(self, plan: _Plan, reserved: set[int]) -> bool:
        """Get blocks for the plan's rows, shrinking its speculation to fit; False = deferred."""
        request = plan.request
        copies = self._copies_needed(request)
        count, shared = self._blocks_for(request, copies, len(plan.selected))
        free = self.pool.free_count()
        if count > free:
            main, _ = self._blocks_for(request, copies, 0)  # the pending position alone
            if main > free:
                if not self._make_room(main, reserved):
                    if request.admitted:  # not preempted itself: wait at the front of the queue
                        self._queue.appendleft(request.request_id)
                        self._emit(
                            "deferred",
                            request.request_id,
                            reason=f"needs {counted(main, 'free block')}; "
                            "space freed now is usable next round",
                        )
                    return False
                copies = self._copies_needed(request)  # making room may have dropped holders
                free = self.pool.free_count()
                count, shared = self._blocks_for(request, copies, len(plan.selected))
            while plan.selected and count > free:
                plan.selected.pop()  # the deepest, most recently ranked node: still prefix-closed
                count, shared = self._blocks_for(request, copies, len(plan.selected))
        fresh = self.pool.allocate(count)
        size = self.config.block_size
        for index in shared:
            block = fresh.pop()
            self.pool.copy_block(request.table[index], block)
            self.pool.release([request.table[index]])
            request.table[index] = block
            # The copy is this request's alone: only the rows it keeps are sealed.
            for role, cursor in request.cursors.items():
                kept = min(size, max(0, cursor[1] - index * size))
                self.pool.sealed[self.pool.roles[role], block] = kept
        if shared:  # copies carry no hash: hash them again (a full one gets the same hash)
            request.hashed = min(request.hashed, min(shared))
        request.table.extend(fresh)
        return True

    def _make_room(self, count: int, reserved: set[int]) -> bool:
        if count <= self.pool.free_count():
            return True
        while len(self._history) > 1 and count > self.pool.free_count():
            self._trim_history(len(self._history) - 1)
            # Counted once trimmed: if an abort comes first, the entry's blocks are still
            # unused and it can be put back.
            self._trimmed_for_space += 1
        if count <= self.pool.free_count():
            return True
        # Space freed from now on is usable next round (this round may still be rewound).
        deficit = count - self.pool.free_count()
        while deficit > 0:
            entry = self.cache.evict_lru()
            if entry is None:
                break
            deficit -= sum(1 for b in entry.blocks if self.pool.refcount[b] == 1)
            self._drop_entry(entry, "evicted for space")
        if deficit > 0:
            victims = [
                r
                for r in self.requests.values()
                if r.status != "finished" and r.table and id(r) not in reserved
            ]
            if victims:
                self._preempt(max(victims, key=lambda r: r.admitted), count)
        return False

    def _preempt(self, request: Request, wanted: int) -> None:
        self._rewrites += 1
        lost = min(self._cursor(request, "target"))
        self.pool.release(request.table)
        self._emit(
            "preempt",
            request.request_id,
            lost_positions=lost,
            freed_blocks=list(request.table),
            reason=f"pool exhausted: another request needed {counted(wanted, 'block')}; "
            f"{request.request_id} was the most recently admitted",
        )
        request.table = []
        request.hashed = 0
        request.cursors = {}
        request.admitted = 0
        request.restore = None  # it holds no rows: the next admission restores afresh
        request.status = "queued"
        request.preemptions += 1
        self.counters["preemptions"] += 1
        if request.request_id in self._queue:
            self._queue.remove(request.request_id)
        self._queue.appendleft(request.request_id)

    # -- verification and commit --------------------------------------------------------------

    def _verify_and_commit(self, plans: list[_Plan], now: float) -> None:
        for plan in plans:
            plan.item = self._verify_item(plan)
        context = None
        if self._round_context is not None and self._round_context[0] == tuple(map(id, plans)):
            context = self._round_context[1]  # the same requests the draft padded this round
        self._round_context = None
        items = [p.item for p in plans]
        outputs, flat = self._forward_isolated(self.target, items, context)  # type: ignore[arg-type]
        self.counters["target_forwards"] += 1
        computed = []
        for plan, out in zip(plans, outputs):
            if isinstance(out, Exception):
                self._finish(plan.request, "error", f"{type(out).__name__}: {out}")
            else:
                computed.append((plan, out))
        if not computed:
            return
        rows = self._store_rows(computed, flat)
        # The target's argmax at every verified node (and the root) of every plan, in one call.
        offsets = 0
        index: list[int] = []
        for plan, out in computed:
            index.extend(offsets + row for row in plan.target_rows.values())
            offsets += len(out)
        logits = rows[np.array(index, dtype=np.intp), self.target.layout.logits]
        best = iter(logits.argmax(axis=-1).tolist())
        for plan, out in computed:
            argmax = {node: next(best) for node in plan.target_rows}
            self._commit(plan, out, argmax, now)

    def _store_rows(
        self, computed: list[tuple[_Plan, Rows]], flat: np.ndarray | None
    ) -> np.ndarray:
        """Write every computed target row into the pool (committed positions first, then the
        tree's nodes as speculative rows); returns the rows of all plans, concatenated.

        One write for the whole batch: each plan's slots are its own blocks (copy-on-write
        happened when the round reserved space), so no plan's commit touches another's rows.
        """
        store = self.pool.stores["target"]
        full: list[tuple[np.ndarray, Rows]] = []  # slots and rows of plans without replays
        for plan, out in computed:
            request, item = plan.request, plan.item
            assert item is not None
            consumer = self._cursor(request, "target")[1]
            slots = plan.slots = self._slot_array(request, consumer, consumer + len(out))
            if item.replay:  # replayed positions keep their stored encoder state
                store.write(slots[: item.replay], out.take(slice(0, item.replay)), encoder=False)
                store.write(slots[item.replay :], out.take(slice(item.replay, None)))
            else:
                full.append((slots, out))
        rows = flat if flat is not None else np.concatenate([out.data for _, out in computed])
        if len(full) == len(computed):
            store.write(
                np.concatenate([slots for slots, _ in full]), Rows(rows, self.target.layout)
            )
        else:
            for slots, out in full:
                store.write(slots, out)
        return rows

    def _verify_item(self, plan: _Plan) -> RowBatchItem:
        base = plan.base_item or self._catch_up_item(plan.request, "target")
        tree = plan.tree
        rows = {ROOT: len(base.tokens) - 1}
        if not plan.selected:
            plan.target_rows = rows
            return base
        count = len(base.tokens)
        tokens, positions, parents = base.tokens.tolist(), base.positions.tolist(), []
        last = len(plan.request.tokens) - 1
        for offset, node in enumerate(plan.selected):
            rows[node] = count + offset
            parents.append(rows[tree.parents[node]])
            tokens.append(tree.tokens[node])
            positions.append(last + tree.depths[node])
        plan.target_rows = rows
        return RowBatchItem(
            context=base.context,
            local=base.local,
            local_positions=base.local_positions,
            tokens=np.array(tokens, dtype=np.int64),
            positions=np.array(positions, dtype=np.int64),
            parents=np.array(base.parents.tolist() + parents, dtype=np.int64),
            replay=base.replay,
            local_lower=base.local_lower,
            consumer_from=base.consumer_from,
            context_key=base.context_key,
        )

    def _forward_isolated(
        self, model: TinyModel, items: list[RowBatchItem], context: BatchContext | None = None
    ) -> tuple[list[Rows | Exception], np.ndarray | None]:
        """One batched forward; if it fails, find the failing requests one by one, so a
        failure finishes only its own request. Also returns every output's rows as one array
        when all items succeeded (None otherwise)."""
        flat = None
        # Overflow and invalid values are found below and fail only their requests: NumPy must
        # not warn about them on stderr (the engine never prints) nor raise under np.seterr.
        with np.errstate(all="ignore"):
            try:
                result = model.forward_rows(items, context)
                outputs: list[Rows | Exception] = list(result)
                flat = getattr(result, "flat", None)
            except Exception:
                self._reset_work_buffers()
                outputs = []
                for item in items:
                    try:
                        outputs.extend(model.forward_rows([item]))
                    except Exception as error:
                        outputs.append(error)
        if flat is None:
            computed = [out.data for out in outputs if isinstance(out, Rows)]
            if len(computed) == len(outputs) and computed:
                flat = np.concatenate(computed)
        if flat is not None and np.isfinite(flat).all():
            return outputs, flat
        for index, out in enumerate(outputs):  # rare: find the non-finite outputs
            if isinstance(out, Rows) and not np.isfinite(out.data).all():
                outputs[index] = FloatingPointError("the model produced non-finite values")
                self._reset_work_buffers()
        return outputs, None

    def _reset_work_buffers(self) -> None:
        """After a failed or non-finite forward, forget every model's work buffers: a draft
        that reads the target's KV pads its rows in the target's buffers, and masked padding is
        added to, so a NaN left anywhere would reach healthy requests in later rounds."""
        for model in self.models.values():
            model.reset_scratch()

    def _commit(self, plan: _Plan, out: Rows, argmax: dict[int, int], now: float) -> None:
        """Accept the longest verified path, commit its tokens and drop speculative blocks."""
        request, tree, item, slots = plan.request, plan.tree, plan.item, plan.slots
        assert item is not None and slots is not None
        n = len(request.tokens)
        consumer = request.cursors["target"][1]  # admitted requests always have cursors
        store = self.pool.stores["target"]
        replay = item.replay
        rows = plan.target_rows
        verified = len(plan.selected)
        decision = accept(tree, plan.selected, argmax, request.eos_id)
        # Move the accepted path's rows next to the committed prefix (a chain is already there).
        for depth, node in enumerate(decision.path, start=1):
            source_row, target_row = rows[node], rows[ROOT] + depth
            if source_row != target_row:
                store.copy_slots(slots[source_row], slots[target_row])
        new_tokens = [tree.tokens[i] for i in decision.path]
        if decision.next_token is not None:
            new_tokens.append(decision.next_token)
        remaining = request.remaining  # before this round's tokens
        new_tokens = new_tokens[:remaining]
        request.tokens.extend(new_tokens)
        if request.identities is None:  # its first computed rows
            request.identities = self._identities()
        # Every row before the new pending token is computed; a zero-token request commits
        # nothing, and every row of its prompt (the last one too) is computed.
        cursor = len(request.tokens) - 1 if new_tokens else n
        request.cursors["target"] = [cursor, cursor]
        self._commit_draft(plan, decision.path, cursor)
        accepted = len(decision.path)
        rolled_back = verified - accepted
        counters = self.counters
        counters["encoder_rows"] += len(item.tokens) - replay
        consumer_rows = (
            len(item.tokens)
            if not request.consumer_from
            else int(np.sum(item.positions >= request.consumer_from))
        )
        counters["consumer_rows"] += consumer_rows * self.target.depth
        counters["accepted"] += accepted
        counters["verified"] += verified
        counters["committed_tokens"] += len(new_tokens)
        counters["rolled_back_positions"] += rolled_back
        request.accepted += accepted
        request.confidences = [tree.path_probs[i] for i in plan.selected]
        tree.judge(plan.selected, decision.path, argmax)
        tree_view = tree.to_dict()
        request.tree = {**tree_view, "round": self.tick, "base_position": n - 1}
        # Rows beyond the new cursor were speculative: their blocks go back to the pool.
        keep_blocks = -(-cursor // self.config.block_size)
        dropped = request.table[keep_blocks:]
        if dropped:
            self.pool.release(dropped)
            del request.table[keep_blocks:]
        self.pool.seal(request.table, consumer, cursor)
        self._hash_full_blocks(request, cursor)
        request.last_commit = {
            "round": self.tick,
            "tokens": new_tokens,
            "accepted": accepted,
            "verified": verified,
            "outcome": decision.kind,
            "rolled_back_positions": rolled_back,
            "dropped_blocks": dropped,
            "speculative_positions": list(range(n, n + verified)),
        }
        self._emit("verify", request.request_id, nodes=tree_view["nodes"])
        self._emit(
            "commit",
            request.request_id,
            tokens=new_tokens,
            accepted=accepted,
            verified=verified,
            outcome=decision.kind,
            rolled_back_positions=rolled_back,
            freed_blocks=dropped,
        )
        if request.fresh:
            request.fresh = False
            self._publish(request, now)
        if (
            request.eos_id is not None
            and request.generated > 0
            and new_tokens[-1:] == [request.eos_id]
        ):
            self._finish(request, "stop", now=now)
        elif remaining <= len(new_tokens):
            self._finish(request, "length", now=now)
        else:
            self._queue.append(request.request_id)

    def _commit_draft(self, plan: _Plan, path: list[int], cursor: int) -> None:
        """Keep the draft rows of committed positions; the draft resumes from there."""
        if "draft" not in self.kv_models or plan.draft_out is None or plan.draft_item is None:
            return
        request = plan.request
        encoder, consumer = self._cursor(request, "draft")
        base_rows = plan.draft_rows[ROOT] + 1  # catch-up rows, root included
        chain = list(range(base_rows))
        for node in path:
            if node not in plan.draft_rows:
                break
            chain.append(plan.draft_rows[node])
        chain = chain[: max(0, cursor - consumer)]
        if not chain:
            return
        out = plan.draft_out
        slots = self._slot_array(request, consumer, consumer + len(chain))
        store = self.pool.stores["draft"]
        replay = min(plan.draft_replay, len(chain))
        rows = out.take(np.array(chain))
        if replay:
            store.write(slots[:replay], rows.take(slice(0, replay)), encoder=False)
        store.write(slots[replay:], rows.take(slice(replay, None)))
        end = consumer + len(chain)
        request.cursors["draft"] = [max(encoder, end), end]
        self.pool.seal(request.table, consumer, end, role="draft")

    # -- cache publication, finishing ---------------------------------------------------------

    def _cache_key(self) -> str:
        identities = "+".join(m.identity for m in self.models.values())
        return f"{identities}|{self.config.recovery_mode}:{self.config.keep}"

    def _publish(self, request: Request, now: float) -> None:
        boundary = min(min(c) for c in request.cursors.values())
        if boundary <= 0:
            return
        blocks = request.table[: -(-boundary // self.config.block_size)]
        ttls = (self.config.state_ttl, self.config.prefix_ttl)
        entry, evicted = self.cache.publish(
            self._cache_key(), tuple(request.tokens[:boundary]), blocks, now=now, ttls=ttls
        )
        if evicted is not None:
            self._drop_entry(evicted, "cache full")
        if entry is not None:
            self.pool.hold(entry.blocks)
            self._emit(
                "publish",
                request.request_id,
                positions=boundary,
                blocks=list(entry.blocks),
                hot_until=entry.hot_until,
                warm_until=entry.warm_until,
            )

    def _drop_entry(self, entry: CacheEntry, why: str) -> None:
        self.pool.release(entry.blocks)
        if why != "expired":
            self.counters["evictions"] += 1
        self._emit(
            "evict", None, positions=len(entry.tokens), blocks=list(entry.blocks), reason=why
        )

    def _finish(
        self, request: Request, reason: str, error: str | None = None, *, now: float | None = None
    ) -> None:
        if reason in ("stop", "length") and request.table:
            self._publish(request, self.now() if now is None else now)
        if request.table:
            cursor = min(self._cursor(request, "target"))
            # A copy of what the committed state reads: the blocks go back now.
            slots = self._slots(request, 0, cursor)
            request.final = self.pool.stores["target"].keep(slots, self.target.window)
            self.pool.release(request.table)
            request.table = []
            request.hashed = 0
        elif request.final is None:
            request.final = FinishedRows.empty(self.target.layout)
        if request.request_id in self._queue:
            self._queue.remove(request.request_id)
        request.status = "finished"
        request.finish_reason = reason
        request.error = error
        request.admitted = 0
        request.cursors = {}
        self._order.append(request.request_id)
        self._emit(
            "finished",
            request.request_id,
            finish_reason=reason,
            error=error,
            generated=request.generated,
        )

    def _result(self, request: Request) -> Result:
        return Result(
            request.request_id,
            request.prompt,
            tuple(request.tokens[len(request.prompt) :]),
            request.finish_reason or "",
            request.error,
            request.accepted,
            request.proposed,
        )

    # -- history: undo and interrupt safety ---------------------------------------------------

    def _checkpoint(self) -> _Checkpoint:
        requests = dict(self.requests)  # finished requests never change: shared
        lengths = {}
        for request_id in self._queue:  # every unfinished request
            live = self.requests[request_id]
            requests[request_id] = live.copy(tokens=live.tokens)
            lengths[request_id] = len(live.tokens)
        checkpoint = _Checkpoint(
            tick=self.tick,
            requests=requests,
            queue=list(self._queue),
            order=list(self._order),
            delivered=set(self._delivered),
            cache=self.cache.copy(),
            counters=dict(self.counters),
            trace_length=len(self.trace),
            lengths=lengths,
            # Kept as int32 (counts and in-block offsets): half of each pool-sized copy.
            refcount=self.pool.refcount.astype(np.int32),
            free=self.pool.free.copy(),
            block_hash=list(self.pool.block_hash),
            sealed=self.pool.sealed.astype(np.int32),
            admissions=self._admissions,
        )
        return checkpoint

    def _after_rewind(self) -> None:
        """After undo or an aborted round: blocks the checkpoint saw as retained for history
        that no longer exists (it was trimmed for space meanwhile) become free again."""
        self._checked_identities = None  # restored requests may predate a weight change
        self._resume_retention()
        needed = {b for c in self._history for b in c.released_after}
        pool = self.pool
        for block in np.flatnonzero(~pool.free & (pool.refcount == 0)):
            if int(block) not in needed:
                pool.free[block] = True

    def _resume_retention(self) -> None:
        if self._history:
            self.pool.retain_releases = True
            self.pool.released = self._history[-1].released_after
        else:
            self.pool.retain_releases = False
            self.pool.released = []

    def _restore(self, checkpoint: _Checkpoint) -> None:
        self._rewrites += 1
        self.tick = checkpoint.tick
        self.requests = dict(checkpoint.requests)
        for request_id, length in checkpoint.lengths.items():
            kept = checkpoint.requests[request_id]
            self.requests[request_id] = kept.copy(tokens=kept.tokens[:length])
        if len(self._finished_views) > len(self.requests):  # forget views of undone submits
            self._finished_views = {
                k: v for k, v in self._finished_views.items() if k in self.requests
            }
        self._queue = deque(checkpoint.queue)
        self._order = list(checkpoint.order)
        self._delivered = set(checkpoint.delivered)
        self.cache = checkpoint.cache.copy()
        self.counters = dict(checkpoint.counters)
        del self.trace[checkpoint.trace_length :]
        self.pool.refcount = checkpoint.refcount.astype(np.int64)
        self.pool.free = checkpoint.free.copy()
        self.pool.block_hash = list(checkpoint.block_hash)
        self.pool.sealed = checkpoint.sealed.astype(np.int64)
        self._admissions = checkpoint.admissions

    def _trim_history(self, depth: int) -> None:
        while len(self._history) > depth:
            oldest = self._history.popleft()
            self.pool.give_back(oldest.released_after)
        self._resume_retention()

    def undo(self) -> list[Event]:
        """Rewind the engine to just before the last step(); returns that round's events."""
        if not self._history:
            raise ValueError(
                "nothing to undo: no step is recorded"
                + (" (undo_depth is 0)" if self.config.undo_depth == 0 else "")
            )
        checkpoint = self._history.pop()
        undone = self.trace[checkpoint.trace_length :]
        self._restore(checkpoint)
        self._after_rewind()
        return undone

    # -- helpers ----------------------------------------------------------------------------

    def _get(self, request_id: str) -> Request:
        if not isinstance(request_id, str) or request_id not in self.requests:
            raise KeyError(f"unknown request id {_shown(request_id)}")
        return self.requests[request_id]

    def _cursor(self, request: Request, role: str) -> list[int]:
        return request.cursors.get(role, [0, 0])

    def _stored(self, request: Request, role: str, start: int, stop: int) -> Stored:
        """A lazy view of the request's rows [start, stop) of one model in the pool."""
        store = self.pool.stores[role]
        if stop <= start or not request.table:
            return Stored(store, slice(0, 0))
        return Stored(store, self._slots(request, start, stop))

    def _slots(self, request: Request, start: int, stop: int) -> np.ndarray | slice:
        """Pool slots of the request's positions [start, stop): a slice (a view, no gather)
        when its blocks are consecutive. Made from a per-table map, as this runs several times
        per request per round."""
        cached = request.slot_map
        if cached is None or cached[0] != request.table:
            table = list(request.table)
            size = self.config.block_size
            first = table[0] if table else 0
            if table == list(range(first, first + len(table))):
                mapping: np.ndarray | int = first * size
            else:
                mapping = (np.array(table)[:, None] * size + np.arange(size)).ravel()
            request.slot_map = cached = (table, mapping)
        mapping = cached[1]
        if isinstance(mapping, int):
            return slice(mapping + start, mapping + stop)
        return mapping[start:stop]

    def _slot_array(self, request: Request, start: int, stop: int) -> np.ndarray:
        slots = self._slots(request, start, stop)
        return np.arange(slots.start, slots.stop) if isinstance(slots, slice) else slots

    def _rows(self, request: Request, role: str, start: int, stop: int) -> Rows:
        """The request's stored rows for positions [start, stop) of one model."""
        if stop <= start or not request.table:
            return Rows.empty(self.kv_models[role].layout)
        return self.pool.stores[role].read(self._slots(request, start, stop))

    def _cache_only_blocks(self) -> set[int]:
        # Between rounds every unfinished request is in the queue (a round takes its batch out).
        held = {b for i in self._queue for b in self.requests[i].table}
        return {b for b in self.cache.blocks() if b not in held}

    def _hash_full_blocks(self, request: Request, cursor: int) -> None:
        """Chain a prefix hash over every newly filled block (blocks are immutable once full)."""
        size = self.config.block_size
        full = cursor // size
        previous = None
        for index in range(request.hashed, full):
            block = request.table[index]
            if previous is None:  # the chain starts from the key, or from the block before
                previous = (
                    self._cache_key()
                    if index == 0
                    else self.pool.block_hash[request.table[index - 1]]
                )
            if self.pool.block_hash[block] is None:
                chunk = tuple(request.tokens[index * size : (index + 1) * size])
                digest = hashlib.blake2b(repr((previous, chunk)).encode(), digest_size=4)
                self.pool.block_hash[block] = digest.hexdigest()
            previous = self.pool.block_hash[block]
        request.hashed = max(request.hashed, full)

    def _emit(self, kind: str, request_id: str | None, **data: Any) -> Event:
        event = {"tick": self.tick, "kind": kind, "request_id": request_id, **data}
        self.trace.append(event)
        return event
