"""The scheduler: who runs this round, how many rows each computes inside the token budget,
what each restores, how many positions each verifies, and who gives up blocks when the pool is
short. It never calls a model.

One token budget covers every target row of a round, as in vLLM v1: first the running requests'
pending positions (and room for their draft nodes), then the prefills in progress, then new
admissions in the policy's order. A prompt longer than what is left is computed in chunks over
several rounds; a request whose prefill is incomplete commits no token and drafts nothing.
`admit` makes that plan (restoring a cached prefix at a request's first admission);
`pending_positions` walks the same way without changing anything. `budget` splits the
verification budget over the drafted trees and reserves each request's blocks, oldest first,
making room (trimming undo history, evicting cache entries, preempting by the policy's rule)
when the pool is short.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from .blocks import BlockManager
from .cache import counted
from .config import EngineConfig
from .history import History
from .model import TinyModel
from .policies import RULES, admission_order, preemption_victim
from .prefixes import Prefixes
from .request import EventLog, Request, Status
from .speculation.budget import choose_budget, select_nodes
from .speculation.proposal import Proposal

Decision = Literal["run", "wait", "skip"]
UNBOUNDED = 2**62  # a token budget of None


@dataclass(eq=False)
class Scheduled:
    """One request's part of the round: its proposal and the nodes the target checks, or the
    end of a prefill chunk that stops before the pending position (no token this round)."""

    proposal: Proposal
    selected: list[int]
    request: Request  # the proposal's, kept at hand (read several times per request)
    stop: int | None = None


@dataclass(eq=False)
class RoundPlan:
    """The round's batch, the target rows each request computes before its draft nodes, and
    the budget left for verified draft nodes."""

    batch: list[Request] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    draft_room: int = 0


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
        self.drafts = False  # the engine has a drafter: decoding requests may verify drafts
        self.now = 0.0  # the clock reading of the round being scheduled

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

    def rows_to_compute(self, request: Request) -> int:
        """Target rows from the request's cursor through its pending position (1: decoding)."""
        return len(request.tokens) - request.cursor("target")[1]

    def _ordered(self) -> list[Request]:
        """The queue in the policy's order: fcfs keeps it; the others put the running requests
        (in queue order) before the waiting ones (in the policy's order)."""
        queued = [self.requests[i] for i in self.queue]
        policy = self.config.schedule_policy
        if policy == "fcfs":
            return queued
        running = [r for r in queued if r.admitted]
        waiting = [r for r in queued if not r.admitted and not r.finished]
        return running + admission_order(policy, waiting, self._cached_length)

    def _cached_length(self, request: Request) -> int:
        return self.prefixes.cached_length(tuple(request.tokens[:-1]), self.now)

    def _walk(self) -> list[tuple[Request, Decision]]:
        """The queue in the policy's order, each with what this round does with it, until the
        batch is full. Changes nothing: `admit` acts on it, `pending_positions` only counts."""
        walked: list[tuple[Request, Decision]] = []
        cap = self.batch_cap()
        # At most max_active requests hold KV at once: one that is not running yet waits for a
        # place (in its queue position), or round-robin would admit every queued request in
        # turn, run the pool dry and preempt the newest forever while the oldest starve.
        resident = self.resident()
        # While an admitted request waits for blocks, nobody new is admitted (vLLM schedules no
        # waiting request in a step that had to preempt): a preempted request readmitted first
        # would take back the cached blocks the waiting one needs, over and over.
        short = self._short_of_space()
        taken = 0
        for request in self._ordered():
            if taken == cap:
                break
            if request.finished:
                walked.append((request, "skip"))
                continue
            if request.status != Status.RUNNING:
                if resident >= self.config.max_active or short:
                    walked.append((request, "wait"))
                    continue
                resident += 1
            taken += 1  # a zero-token request too: it computes its prompt
            walked.append((request, "run"))
        return walked

    def admit(self, now: float) -> RoundPlan:
        """This round's batch, each request's rows inside the token budget; the batch leaves
        the queue, everyone else keeps their place."""
        self.now = now
        cfg = self.config
        left = UNBOUNDED if cfg.token_budget is None else cfg.token_budget
        walked = self._walk()
        short = self._short_of_space()
        for request, decision in walked:
            if decision == "wait":
                request.waiting_for = (
                    f"{short.request_id}, which waits for {counted(short.needs_blocks, 'block')}"
                    if short
                    else f"a place: max_active={cfg.max_active} requests hold KV ({self._rule()})"
                )
        ready = [r for r, decision in walked if decision == "run"]
        running = [r for r in ready if r.admitted]
        plan = RoundPlan()
        for request in running:  # decoding requests: the pending position
            if self.rows_to_compute(request) == 1:
                left = self._grant(plan, request, 1, left)
        if self.drafts and any(r.remaining > 1 for r in plan.batch):
            plan.draft_room = max(0, min(left, cfg.max_batch_tokens - len(plan.batch)))
            left -= plan.draft_room
        waiting = [r for r in running if self.rows_to_compute(r) > 1]
        for request in waiting + [r for r in ready if not r.admitted]:
            if left < 1:
                self._not_scheduled(request)
                continue
            if not request.admitted:
                self.restore(request, now)
            rows = self.rows_to_compute(request)
            chunk = min(rows, left, cfg.long_prefill_threshold or rows)
            left = self._grant(plan, request, chunk, left)
        if self.drafts:  # what the prefills left may verify drafts too (a hot hit's, say)
            plan.draft_room += left
        order = {id(r): index for index, r in enumerate(ready)}
        plan.batch.sort(key=lambda r: order[id(r)])  # queue order: the round-robin goes on
        taken = {r.request_id for r in plan.batch}
        kept = [i for i in self.queue if i not in taken and not self.requests[i].finished]
        self.queue.clear()
        self.queue.extend(kept)
        return plan

    def _grant(self, plan: RoundPlan, request: Request, rows: int, left: int) -> int:
        if left < rows:
            self._not_scheduled(request)
            return left
        plan.batch.append(request)
        plan.rows[request.request_id] = rows
        request.status = Status.RUNNING
        request.waiting_for = None
        return left - rows

    def _not_scheduled(self, request: Request) -> None:
        """The token budget ran out before this request: it keeps its place for next round."""
        why = (
            f"the token budget ({self.config.token_budget}) went to requests ahead ({self._rule()})"
        )
        request.waiting_for = why
        if request.admitted:
            self.log.emit("deferred", request.request_id, reason=why)

    def _short_of_space(self) -> Request | None:
        """The first admitted request that waits for free blocks, if any."""
        for request_id in self.queue:
            request = self.requests[request_id]
            if request.needs_blocks and request.admitted:
                return request
        return None

    def _rule(self) -> str:
        return RULES[self.config.schedule_policy]

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
        budget = self.config.token_budget
        return total if budget is None else min(total, budget)

    def restore(self, request: Request, now: float) -> None:
        """Attach the longest usable cached prefix to a request that holds no rows."""
        cfg = self.config
        self.admissions += 1
        request.admitted = self.admissions
        request.fresh = True
        found = self.prefixes.lookup(tuple(request.tokens[:-1]), now)
        reused = found.reused
        if found.entry is not None:
            self.blocks.attach(request, found.entry.blocks[: -(-reused // cfg.block_size)])
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
        self.log.emit("restore", request.request_id, **request.restore)

    # -- the verification budget and pool space ---------------------------------------------

    def budget(self, proposals: list[Proposal], plan: RoundPlan) -> list[Scheduled]:
        """The nodes each request verifies (or where its prefill chunk stops), and blocks for
        them; deferred requests drop out."""
        chunks, verifying = [], []
        for p in proposals:
            request = p.request
            rows = plan.rows[request.request_id]
            if rows < self.rows_to_compute(request):
                stop = request.cursor("target")[1] + rows
                chunks.append(Scheduled(p, [], request, stop))
            else:
                verifying.append(p)
        plans = self._verification(verifying, len(verifying) + plan.draft_room) + chunks
        reserved: set[int] = set()  # requests that already hold this round's space
        for each in sorted(plans, key=lambda p: p.request.admitted):  # oldest gets space first
            if each.request.admitted and self._reserve(each, reserved):
                reserved.add(id(each.request))
        return [each for each in plans if id(each.request) in reserved]

    def _verification(self, proposals: list[Proposal], room: int) -> list[Scheduled]:
        """Split the verification budget (`max_batch_tokens`, inside the token budget's
        `room`) over the requests that reach their pending position this round."""
        if not proposals:
            return []
        cfg = self.config
        current = [[p.tree.path_probs[i] for i in range(1, len(p.tree))] for p in proposals]
        previous = [p.request.confidences for p in proposals]
        budget = choose_budget(
            current,
            previous,
            max_batch_tokens=min(cfg.max_batch_tokens, room),
            cost_curve=cfg.cost_curve,
        )
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
        return [
            Scheduled(p, select_nodes(p.tree, length - 1), p.request)
            for p, length in zip(proposals, budget.per_request)
        ]

    def _reserve(self, plan: Scheduled, reserved: set[int]) -> bool:
        """Get blocks for the plan's rows, shrinking its speculation to fit; False = deferred."""
        request, blocks = plan.request, self.blocks
        copies = blocks.copies(request)
        count, shared = blocks.blocks_needed(request, copies, self._stop(plan))
        free = blocks.free_count()
        if count > free:
            # The least this round can do: its prefill chunk whole (as vLLM, a chunk is not cut
            # for space), or the pending position without drafts.
            least = plan.stop if plan.stop is not None else len(request.tokens)
            main, _ = blocks.blocks_needed(request, copies, least)
            if main > free:
                if not self._make_room(main, reserved, request):
                    if request.admitted:  # not preempted itself: wait at the front of the queue
                        self.queue.appendleft(request.request_id)
                        request.waiting_for = f"{counted(main, 'free block')}"
                        request.needs_blocks = main
                        self.log.emit(
                            "deferred",
                            request.request_id,
                            reason=f"needs {counted(main, 'free block')}; "
                            "space freed now is usable next round",
                        )
                    return False
                copies = blocks.copies(request)  # making room may have dropped holders
                free = blocks.free_count()
                count, shared = blocks.blocks_needed(request, copies, self._stop(plan))
            while count > free and plan.selected:
                plan.selected.pop()  # the deepest, most recently ranked node: still prefix-closed
                count, shared = blocks.blocks_needed(request, copies, self._stop(plan))
        blocks.take(request, count, shared)
        request.needs_blocks = 0
        return True

    def _stop(self, plan: Scheduled) -> int:
        """The position before which the plan's rows end."""
        if plan.stop is not None:
            return plan.stop
        return len(plan.request.tokens) + len(plan.selected)

    def _make_room(self, count: int, reserved: set[int], needer: Request) -> bool:
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
                victim, rule = preemption_victim(self.config.schedule_policy, victims)
                self._preempt(victim, count, rule, offer=victim is not needer)
        return False

    def _preempt(self, request: Request, wanted: int, rule: str, *, offer: bool) -> None:
        """The victim offers what it computed to the cache and gives its blocks back. The cache
        keeps them until the space is needed (least recently used entries go first), as vLLM's
        free queue keeps a preempted request's cached blocks until they are reused. A request
        that gives up its own blocks for itself offers nothing: they would stay pinned."""
        lost = min(request.cursor("target"))
        if offer:
            self.prefixes.publish(request, self.now)
        freed = self.blocks.release_all(request, rewritten=True)
        kept = self.prefixes.cached_length(tuple(request.tokens[:-1]), self.now)
        self.log.emit(
            "preempt",
            request.request_id,
            lost_positions=lost,
            kept_positions=kept,
            recompute_positions=len(request.tokens) - kept,
            freed_blocks=list(freed),
            reason=f"pool exhausted: another request needed {counted(wanted, 'block')}; {rule}",
        )
        request.cursors = {}
        request.admitted = 0
        request.needs_blocks = 0
        request.restore = None  # it holds no rows: the next admission restores afresh
        request.status = Status.QUEUED
        request.preemptions += 1
        self.counters["preemptions"] += 1
        if request.request_id in self.queue:
            self.queue.remove(request.request_id)
        self.queue.appendleft(request.request_id)
