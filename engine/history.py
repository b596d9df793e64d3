"""Undo history: a checkpoint before every round, and what rewinding to one means.

A checkpoint holds references, not copies, wherever the engine never changes an object in
place: finished requests, the arrays of the pool's rows (blocks released after a checkpoint are
retained, not reused, while the checkpoint lives).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .blocks import BlockManager, PoolMarks, SavedRows
from .cache import CacheState
from .request import EventLog, Request

if TYPE_CHECKING:  # they hold the history: made after it, then tracked
    from .prefixes import Prefixes
    from .scheduler import Scheduler
    from .views import Views


@dataclass(eq=False)
class Checkpoint:
    """Everything step() may change, taken before it runs."""

    tick: int
    requests: dict[str, Request]
    queue: list[str]
    order: list[str]
    delivered: set[str]
    cache: CacheState
    counters: dict[str, int]
    trace_length: int
    # Unfinished requests' copies share their token lists with the live requests: a list is
    # only ever appended to (a rollback gives its request a new one), so the first `lengths`
    # tokens stay what they were. Copying each history at every round cost 17 KB per
    # 2000-token request per round of undo history.
    lengths: dict[str, int]
    pool: PoolMarks
    admissions: int
    released_after: list[int] = field(default_factory=list)
    # Rows of cached free blocks (the "blocks" policy) the round reused, as they were.
    evicted_rows: list[SavedRows] = field(default_factory=list)

    def live_requests(self) -> dict[str, Request]:
        """The requests as they were: unfinished ones copied again (the live ones move on)."""
        requests = dict(self.requests)
        for request_id, length in self.lengths.items():
            kept = self.requests[request_id]
            requests[request_id] = kept.copy(tokens=kept.tokens[:length])
        return requests


class History:
    """The last `depth` checkpoints, and the blocks released since each was taken."""

    def __init__(self, blocks: BlockManager) -> None:
        self.blocks = blocks
        self.entries: deque[Checkpoint] = deque()
        self.trimmed_for_space = 0  # entries the current round trimmed to make room
        # The rows of the blocks those entries kept, as they were: the round may reuse the
        # blocks, and an aborted round puts the entries back.
        self.saved_rows: list[SavedRows] = []

    def track(
        self,
        scheduler: Scheduler,
        prefixes: Prefixes,
        log: EventLog,
        counters: dict[str, int],
        views: Views,
    ) -> None:
        """What a checkpoint saves and a rewind puts back (beside the pool's marks)."""
        self.scheduler, self.prefixes, self.log = scheduler, prefixes, log
        self.counters, self.views = counters, views

    def save(self) -> Checkpoint:
        scheduler = self.scheduler
        requests = dict(scheduler.requests)  # finished requests never change: shared
        lengths = {}
        for request_id in scheduler.queue:  # every unfinished request
            live = requests[request_id]
            requests[request_id] = live.copy(tokens=live.tokens)
            lengths[request_id] = len(live.tokens)
        return Checkpoint(
            tick=self.log.tick,
            requests=requests,
            queue=list(scheduler.queue),
            order=list(scheduler.finished),
            delivered=set(scheduler.delivered),
            cache=self.prefixes.cache.copy(),
            counters=dict(self.counters),
            trace_length=len(self.log.events),
            lengths=lengths,
            pool=self.blocks.marks(),
            admissions=scheduler.admissions,
        )

    def load(self, checkpoint: Checkpoint) -> None:
        """Put the engine back as `checkpoint` saw it. Containers are refilled in place: the
        components share them."""
        scheduler = self.scheduler
        self.log.tick = checkpoint.tick
        scheduler.requests.clear()
        scheduler.requests.update(checkpoint.live_requests())
        self.views.forget_unknown()
        scheduler.queue.clear()
        scheduler.queue.extend(checkpoint.queue)
        scheduler.finished[:] = checkpoint.order
        scheduler.delivered.clear()
        scheduler.delivered.update(checkpoint.delivered)
        scheduler.admissions = checkpoint.admissions
        scheduler.checked_identities = None  # restored requests may predate a weight change
        self.prefixes.cache = checkpoint.cache.copy()
        self.counters.update(checkpoint.counters)
        self.log.truncate(checkpoint.trace_length)
        self.blocks.load(checkpoint.pool)
        for saved in reversed(checkpoint.evicted_rows):  # the cache's free blocks, as they were
            self.blocks.load_rows(saved)

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, checkpoint: Checkpoint) -> None:
        """A round starts from `checkpoint`."""
        self.entries.append(checkpoint)
        self.saved_rows = []
        self.resume_retention()

    def pop(self) -> Checkpoint:
        return self.entries.pop()

    def trim(self, depth: int) -> None:
        """Forget the oldest entries beyond `depth`; their retained blocks become free."""
        while len(self.entries) > depth:
            oldest = self.entries.popleft()
            released = oldest.released_after
            if released:
                # A block the "blocks" cache policy kept may be hit, released again and so
                # retained by a later entry too: that one still needs its rows.
                later = {b for entry in self.entries for b in entry.released_after}
                released = [b for b in released if b not in later]
            self.blocks.give_back(released)
        self.resume_retention()

    def trim_for_space(self, count: int) -> None:
        """Drop the oldest entries (never the round's own) until `count` blocks are free."""
        while len(self.entries) > 1 and count > self.blocks.free_count():
            self.saved_rows.append(self.blocks.save_rows(self.entries[0].released_after))
            self.trim(len(self.entries) - 1)
            # Counted once trimmed: if an abort comes first, the entry's blocks are still
            # unused and it can be put back.
            self.trimmed_for_space += 1

    def put_back(self, entries: list[Checkpoint], *, wrote: bool) -> None:
        """After an aborted round: every entry comes back, with its retained blocks as the
        checkpoint saw them (rows the round wrote into blocks of entries it trimmed for
        space are written back)."""
        if wrote:
            for saved in self.saved_rows:
                self.blocks.load_rows(saved)
        self.saved_rows = []
        self.entries = deque(entries)

    def resume_retention(self) -> None:
        newest = self.entries[-1] if self.entries else None
        self.blocks.retain_into(None if newest is None else newest.released_after)
        self.blocks.evicted_rows = None if newest is None else newest.evicted_rows

    def rewind(
        self, checkpoint: Checkpoint | None, entries: list[Checkpoint] | None = None,
        *, wrote: bool = False,
    ) -> None:  # fmt: skip
        """Load `checkpoint` (if any); after an aborted round, `entries` is the history the
        round found, put back (see `put_back`); then the retained blocks follow."""
        if checkpoint is not None:
            self.load(checkpoint)
        if entries is not None:
            self.put_back(entries, wrote=wrote)
        self.after_rewind()

    def after_rewind(self) -> None:
        """After undo or an aborted round: blocks the checkpoint saw as retained for history
        that no longer exists (it was trimmed for space meanwhile) become free again."""
        self.resume_retention()
        self.blocks.free_unneeded({b for c in self.entries for b in c.released_after})
