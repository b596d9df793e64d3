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
from .metrics import synthetic_cost
from .model import TinyModel
from .policies import RULES, admission_order
from .prefixes import Prefixes
from .request import EventLog, Request, Status
from .reservation import PoolSpace, Scheduled
from .speculation.budget import choose_budget, select_nodes
from .speculation.proposal import Proposal

Decision = Literal["run", "wait", "skip"]
UNBOUNDED = 2**62  # a token budget of None


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
        self.config, self.kv_models, self.blocks = config, kv_models, blocks
        self.prefixes, self.history, self.log, self.counters = prefixes, history, log, counters
        self.requests: dict[str, Request] = {}
        self.queue: deque[str] = deque()  # every unfinished request, between rounds
        self.admissions = self.admissions_before_round = 0  # later numbers: admitted this round
        self.finished: list[str] = []  # finish order, for run()'s delivery
        self.delivered: set[str] = set()  # results run() or generate() returned
        # The models' identities at the last check for replaced weights (None: check again).
        self.checked_identities: dict[str, str] | None = None
        self.space = PoolSpace(config, blocks, prefixes, history, log, counters, self)
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

    def deliver(self) -> list[Request]:
        """The finished requests not delivered before, now delivered: in submission order (the
        order of `requests`), as vLLM's LLM.generate and the reference return them, so results
        pair with their prompts; step()'s events keep the real order."""
        finished = set(self.finished)
        fresh = [r for key, r in self.requests.items() if key in finished]
        fresh = [r for r in fresh if r.request_id not in self.delivered]
        self.delivered.update(r.request_id for r in fresh)
        return fresh

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
        self.admissions_before_round = self.admissions
        cfg = self.config
        left = UNBOUNDED if cfg.token_budget is None else cfg.token_budget
        walked = self._walk()
        short = self._short_of_space()
        for request, decision in walked:
            if decision == "wait":
                request.waiting_for = (
                    f"room: {short.request_id} lacked {counted(short.needs_blocks, 'free block')}"
                    " as the round began; nobody is admitted past it"  # true after it, too
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
        return self.space.reserve(plans, self.now)

    def emit_schedule(self, plans: list[Scheduled], now: float) -> None:
        """What the round computes, request by request, against the token budget."""
        parts = []
        for each in plans:
            request = each.request
            stop = len(request.tokens) if each.stop is None else each.stop
            rows = stop - request.cursor("target")[1]
            prefill = rows if rows > 1 else 0
            parts.append(
                {
                    "request_id": request.request_id,
                    "prefill": prefill,
                    "decode": rows - prefill,
                    "draft": len(each.selected),
                }
            )
        rows = sum(p["prefill"] + p["decode"] + p["draft"] for p in parts)
        cost = {"synthetic_seconds": synthetic_cost(rows, self.config.cost_curve)}
        self.log.emit(
            "schedule",
            None,
            budget=self.config.token_budget,
            rows=rows,
            requests=parts,
            clock=now,
            **(cost if self.config.synthetic_clock else {}),
        )

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
