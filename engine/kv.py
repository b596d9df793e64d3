"""Paged KV: a pool of fixed-size blocks holding every model's per-position rows.

A block holds `block_size` consecutive positions of one token sequence, for the target and (if
any) the draft model at once, so a request has one block table. Blocks are reference counted:
each request table and each prefix-cache entry that holds a block counts once. A block whose
count drops to zero is either free or *retained* for the undo history (its rows are still needed
to rewind), never silently reused.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .config import MAX_POOL_POSITIONS, EngineConfig
from .model import TinyModel, check_fits_in_memory
from .rows import FinishedRows, Rows, Stored, planes


class PoolExhausted(Exception):
    """Raised internally when an allocation cannot be satisfied right now."""


class ModelStore:
    """One model's rows for every slot of the pool (slot = block * block_size + offset).

    What global attention reads (encoder K, V and shared K, V: the `Layout.globals` columns)
    is kept as four planes, `planes[p]` of shape (slots, W), so the keys of a run of slots are
    one contiguous array (measured 1.5-1.8x faster long-context attention than strided rows).
    `rest` holds the other columns (source, local K/V, logits) row by row.
    """

    def __init__(self, model: TinyModel, slots: int) -> None:
        self.layout = model.layout
        self.width = model.width
        self.split = model.layout.globals.stop
        # Written through once now: lazily mapped zero pages would make every first write to a
        # slot pay a page fault inside the round (measured 10-70x slower writes).
        self.planes = np.full((self.split // self.width, slots, self.width), 0.0)
        self.rest = np.full((slots, model.layout.size - self.split), 0.0)
        self.writes = 0  # calls that changed rows: an aborted round asks if it wrote any

    def write(self, slots: np.ndarray | slice, rows: Rows, *, encoder: bool = True) -> None:
        """Store rows at `slots`; `encoder=False` writes only the consumer part (warm replay)."""
        self.writes += 1
        if encoder:
            self.planes[:, slots] = planes(rows.data[:, : self.split], self.width)
            self.rest[slots] = rows.data[:, self.split :]
        else:
            start = self.layout.local.start
            self.rest[slots, start - self.split :] = rows.data[:, start:]

    def read(self, slots: np.ndarray | slice) -> Rows:
        """A copy of the full rows at `slots` (a new array, the caller's to keep)."""
        stacked = self.planes[:, slots]  # a view when `slots` is a slice
        count = stacked.shape[1]
        data = np.empty((count, self.layout.size))
        planes(data[:, : self.split], self.width)[...] = stacked
        data[:, self.split :] = self.rest[slots]
        return Rows(data, self.layout)

    def keep(self, slots: np.ndarray | slice, tail: int) -> FinishedRows:
        """A copy of what a finished request's committed state reads at `slots` (see
        `FinishedRows`; `tail` must be at least the model's window): the planes and `source` of
        every slot, full rows of the last `tail`."""
        stored = Stored(self, slots)
        stacked, source = stored.planes(), stored.columns(self.layout.source)
        last: slice | np.ndarray
        if isinstance(slots, slice):  # views: copy them
            stacked, source = stacked.copy(), source.copy()
            last = slice(max(slots.start, slots.stop - tail), slots.stop)
        else:
            last = slots[len(slots) - min(tail, len(slots)) :]
        return FinishedRows(stacked, source, self.read(last))

    def copy_slots(
        self, source: np.ndarray | slice | int, target: np.ndarray | slice | int
    ) -> None:
        self.writes += 1
        self.planes[:, target] = self.planes[:, source]
        self.rest[target] = self.rest[source]


@dataclass
class PoolCounts:
    total: int
    free: int
    used: int  # held + cached + retained
    held: int  # in some request's table
    cached: int  # held only by the prefix cache
    shared: int
    retained: int  # refcount 0, kept for undo history


def _check_memory(models: dict[str, TinyModel], slots: int) -> None:
    """Refuse a pool larger than the machine's memory. The stores are written through when
    made, so with overcommitted memory such a pool is not a MemoryError but a process the
    system kills."""
    check_fits_in_memory(
        8 * slots * sum(model.layout.size for model in models.values()),
        f"a pool of {slots} positions needs {{size}} for its rows",
        ": lower num_blocks (or kv_cache_memory_mib) or block_size",
    )


def pool_blocks(config: EngineConfig, target: TinyModel, draft: TinyModel | None = None) -> int:
    """Blocks in the pool an Engine of these models makes: `config.num_blocks`, or as many
    as `config.kv_cache_memory_mib` holds of the rows the models store (an early-exit draft
    reads the target's rows and stores none)."""
    if config.num_blocks is not None:
        return config.num_blocks
    stored = [target]
    if draft is not None and not draft.is_early_exit_of(target):
        stored.append(draft)
    position_bytes = 8 * sum(model.layout.size for model in stored)
    positions = int(config.kv_cache_memory_mib * 2**20) // position_bytes
    blocks = min(positions, MAX_POOL_POSITIONS) // config.block_size
    if blocks < 1:
        raise ValueError(
            f"kv_cache_memory_mib={config.kv_cache_memory_mib:g} holds {positions} positions "
            f"of these models, less than one block of {config.block_size}: raise "
            "kv_cache_memory_mib or set num_blocks"
        )
    return blocks


class BlockPool:
    """Fixed pool of blocks with refcounts, lowest-id-first allocation and copy-on-write.

    With a free queue (`use_free_queue`, the "blocks" cache policy) allocation takes the
    queue's head instead, and freed blocks join its tail: the least recently freed block is
    reused first, and `on_reuse` hears of each block taken, before its hash is forgotten.
    """

    def __init__(self, models: dict[str, TinyModel], *, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        _check_memory(models, num_blocks * block_size)
        self.stores = {role: ModelStore(m, num_blocks * block_size) for role, m in models.items()}
        self.refcount = np.zeros(num_blocks, dtype=np.int64)
        self.free = np.ones(num_blocks, dtype=bool)
        self.block_hash: list[str | None] = [None] * num_blocks
        # Leading slots of each block holding committed rows. They stay immutable until the block
        # is freed and reused: a write below this mark must go to a copy, because a request, a
        # cache entry or the undo history may still read those rows.
        # One row of marks per model: the draft's rows in a block may lag the target's.
        self.roles = {role: index for index, role in enumerate(self.stores)}
        self.sealed = np.zeros((len(self.roles), num_blocks), dtype=np.int64)
        # Blocks released since the newest history mark; they stay out of the free list until
        # the history that may still need their rows is dropped.
        self.retain_releases = False
        self.released: list[int] = []
        # Free blocks in the order they were freed (None: allocate lowest ids first).
        self.free_queue: OrderedDict[int, None] | None = None
        self.on_reuse: Callable[[int], None] | None = None

    def use_free_queue(self, on_reuse: Callable[[int], None]) -> None:
        """Allocate from the head of a queue of free blocks (now: every free one, by id)."""
        self.free_queue = OrderedDict.fromkeys(int(b) for b in np.flatnonzero(self.free))
        self.on_reuse = on_reuse

    def _set_free(self, block: int) -> None:
        self.free[block] = True
        if self.free_queue is not None:
            self.free_queue[int(block)] = None  # at the tail (a block is queued once)

    # -- allocation and references -----------------------------------------------------------

    def allocate(self, count: int) -> list[int]:
        """Take `count` free blocks (lowest ids first, so replays allocate identically)."""
        if count <= 0:
            return []
        ids = self._take_free(count)
        self.free[ids] = False
        self.refcount[ids] = 1
        self.sealed[:, ids] = 0
        for block in ids:
            self.block_hash[block] = None
        return [int(b) for b in ids]

    def _take_free(self, count: int) -> np.ndarray:
        queue = self.free_queue
        if queue is None:
            ids = np.flatnonzero(self.free)[:count]
            if len(ids) < count:
                raise PoolExhausted(f"need {count} blocks, {len(ids)} free")
            return ids
        if len(queue) < count:
            raise PoolExhausted(f"need {count} blocks, {len(queue)} free")
        taken = [queue.popitem(last=False)[0] for _ in range(count)]
        if self.on_reuse is not None:
            for block in taken:
                self.on_reuse(block)
        return np.array(taken, dtype=np.int64)

    def hold(self, blocks: Iterable[int]) -> None:
        """Count one more holder of each block; a free one leaves the free list (a hit)."""
        for block in blocks:
            if self.refcount[block] == 0 and self.free[block]:
                self.free[block] = False
                if self.free_queue is not None:
                    del self.free_queue[int(block)]
            self.refcount[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            self.refcount[block] -= 1
            if self.refcount[block] < 0:
                raise AssertionError(f"block {block} released more often than held")
            if self.refcount[block] == 0:
                if self.retain_releases:
                    self.released.append(block)
                else:
                    self._set_free(block)

    def seal(self, table: list[int], start: int, stop: int, role: str = "target") -> None:
        """Mark one model's positions [start, stop) of a block table as committed."""
        size = self.block_size
        marks = self.sealed[self.roles[role]]
        for index in range(start // size, -(-stop // size)):
            block = table[index]
            marks[block] = max(marks[block], min(size, stop - index * size))

    def blocks_to_copy(self, table: list[int], firsts: dict[str, int]) -> list[int]:
        """Indices of the table's blocks where writing each model's rows from position
        `firsts[role]` on would change rows someone else (another holder, a cache entry, the
        undo history) may read."""
        size = self.block_size
        marks = [(self.sealed[self.roles[role]], first) for role, first in firsts.items()]
        refcount = self.refcount
        return [
            index
            for index in range(min(firsts.values()) // size, len(table))
            if refcount[table[index]] > 1
            or any(mark[table[index]] > max(0, first - index * size) for mark, first in marks)
        ]

    def give_back(self, blocks: list[int]) -> None:
        """Return retained blocks (refcount 0) to the free list."""
        for block in blocks:
            if self.refcount[block] == 0 and not self.free[block]:
                self._set_free(block)

    @property
    def writes(self) -> int:
        """Row writes and copies into any store so far."""
        return sum(store.writes for store in self.stores.values())

    def free_count(self) -> int:
        return int(np.count_nonzero(self.free))

    def copy_block(self, source: int, target: int) -> None:
        size = self.block_size
        src = slice(source * size, (source + 1) * size)
        dst = slice(target * size, (target + 1) * size)
        for store in self.stores.values():
            store.copy_slots(src, dst)
        # A copy is made to be written: its prefix hash is computed once its content is full.
        self.block_hash[target] = None
        self.sealed[:, target] = self.sealed[:, source]

    # -- views ------------------------------------------------------------------------------

    def counts(self, cache_only: set[int]) -> PoolCounts:
        free = int(self.free.sum())
        retained = int(((self.refcount == 0) & ~self.free).sum())
        used = self.num_blocks - free
        return PoolCounts(
            total=self.num_blocks,
            free=free,
            used=used,
            held=used - len(cache_only) - retained,
            cached=len(cache_only),
            # As the block states say "shared": held by a request and someone else (a block
            # only cache entries hold is "cached", however many hold it).
            shared=int((self.refcount > 1).sum())
            - int(np.count_nonzero(self.refcount[list(cache_only)] > 1)),
            retained=retained,
        )
