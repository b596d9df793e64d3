"""Pool space for a round: blocks for every scheduled request, oldest first, and room made
when the pool is short (undo history trimmed, cache entries evicted, a request preempted by
the schedule policy's rule). Speculation shrinks to fit; a prefill chunk is taken whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .blocks import BlockManager
from .cache import counted
from .config import EngineConfig
from .history import History
from .policies import preemption_victim
from .prefixes import Prefixes
from .request import EventLog, Request, Status
from .speculation.proposal import Proposal

if TYPE_CHECKING:
    from .scheduler import Scheduler


@dataclass(eq=False)
class Scheduled:
    """One request's part of the round: its proposal and the nodes the target checks, or the
    end of a prefill chunk that stops before the pending position (no token this round)."""

    proposal: Proposal
    selected: list[int]
    request: Request  # the proposal's, kept at hand (read several times per request)
    stop: int | None = None


class PoolSpace:
    def __init__(
        self,
        config: EngineConfig,
        blocks: BlockManager,
        prefixes: Prefixes,
        history: History,
        log: EventLog,
        counters: dict[str, int],
        scheduler: Scheduler,
    ) -> None:
        self.config = config
        self.blocks = blocks
        self.prefixes = prefixes
        self.history = history
        self.log = log
        self.counters = counters
        self.scheduler = scheduler  # its queue and requests: a victim goes back to the queue
        self.now = 0.0

    def reserve(self, plans: list[Scheduled], now: float) -> list[Scheduled]:
        """The plans whose requests got their blocks; the others were deferred or preempted."""
        self.now = now
        reserved: set[int] = set()  # requests that already hold this round's space
        for each in sorted(plans, key=lambda p: p.request.admitted):  # oldest gets space first
            if each.request.admitted and self._reserve(each, reserved):
                reserved.add(id(each.request))
        return [each for each in plans if id(each.request) in reserved]

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
                        self.scheduler.queue.appendleft(request.request_id)
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
                for r in self.scheduler.requests.values()
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
        why = f"another request needed {counted(wanted, 'block')}; {rule}"
        if request.admitted > self.scheduler.admissions_before_round:
            # Admitted this round, it has not run: it goes back to waiting, as vLLM leaves a
            # new request unscheduled when the running ones took the space (no preemption).
            request.waiting_for = f"free blocks: it gave its place back ({why})"
            self.log.emit("deferred", request.request_id, reason=f"gave its place back: {why}")
        else:
            kept = self.prefixes.cached_length(tuple(request.tokens[:-1]), self.now)
            self.log.emit(
                "preempt",
                request.request_id,
                lost_positions=lost,
                kept_positions=kept,
                recompute_positions=len(request.tokens) - kept,
                freed_blocks=list(freed),
                reason=f"pool exhausted: {why}",
            )
            request.preemptions += 1
            self.counters["preemptions"] += 1
        request.cursors = {}
        request.admitted = 0
        request.needs_blocks = 0
        request.restore = None  # it holds no rows: the next admission restores afresh
        request.status = Status.QUEUED
        if request.request_id in self.scheduler.queue:
            self.scheduler.queue.remove(request.request_id)
        self.scheduler.queue.appendleft(request.request_id)
