"""The block manager: the only code that reads or writes the pool's internals.

It gives requests blocks (lowest ids first), copies a shared block before a request writes into
it, seals committed rows, chains a prefix hash over every full block, holds and releases blocks
for the prefix cache, and keeps released blocks for the undo history until it lets them go.
It also maps a request's positions to pool slots.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .kv import BlockPool, PoolCounts
from .model import TinyModel
from .request import Request
from .rows import FinishedRows, Rows, Stored


@dataclass(eq=False)
class PoolMarks:
    """The pool's bookkeeping at a checkpoint (rows are not copied: retention keeps them)."""

    # Kept as int32 (counts and in-block offsets): half of each pool-sized copy.
    refcount: np.ndarray
    free: np.ndarray
    block_hash: list[str | None]
    sealed: np.ndarray
    free_queue: OrderedDict[int, None] | None = None


def stored_positions(request: Request) -> int:
    """Positions whose rows every model has stored (and sealed)."""
    return min(min(c) for c in request.cursors.values()) if request.cursors else 0


def chain_hash(previous: str, chunk: tuple[int, ...]) -> str:
    """A full block's prefix hash: its parent's hash (or the cache key) and its tokens. Long
    enough that the "blocks" cache policy may trust it as a key (viewers show a short form)."""
    return hashlib.blake2b(repr((previous, chunk)).encode(), digest_size=16).hexdigest()


@dataclass(eq=False)
class SavedRows:
    """Copies of some blocks' rows, every model's, to write back later."""

    blocks: list[int]
    rows: dict[str, Rows]


class BlockManager:
    def __init__(self, kv_models: dict[str, TinyModel], *, num_blocks: int, block_size: int):
        self.kv_models = kv_models
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.pool = BlockPool(kv_models, num_blocks=num_blocks, block_size=block_size)
        # Models keep padded copies of stored rows across calls, keyed by a request's
        # `context_key`: this count changes whenever committed rows may have been rewritten.
        self.rewrites = 0
        # The prefix cache's hooks: blocks of a request newly full for every model, a request
        # giving back all its blocks (finished or preempted) or its rows from a position on.
        self.on_full: Callable[[Request], None] | None = None
        self.on_release_all: Callable[[Request], None] | None = None
        self.on_truncate: Callable[[Request, int], None] | None = None
        # Where rows of cached blocks reused this round are kept for the undo history.
        self.evicted_rows: list[SavedRows] | None = None

    # -- reading rows -----------------------------------------------------------------------

    def slots(self, request: Request, start: int, stop: int) -> np.ndarray | slice:
        """Pool slots of the request's positions [start, stop): a slice (a view, no gather)
        when its blocks are consecutive. Made from a per-table map, as this runs several times
        per request per round."""
        cached = request.slot_map
        if cached is None or cached[0] != request.table:
            table = list(request.table)
            size = self.block_size
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

    def slot_array(self, request: Request, start: int, stop: int) -> np.ndarray:
        slots = self.slots(request, start, stop)
        return np.arange(slots.start, slots.stop) if isinstance(slots, slice) else slots

    def stored(self, request: Request, role: str, start: int, stop: int) -> Stored:
        """A lazy view of the request's rows [start, stop) of one model in the pool."""
        store = self.pool.stores[role]
        if stop <= start or not request.table:
            return Stored(store, slice(0, 0))
        return Stored(store, self.slots(request, start, stop))

    def rows(self, request: Request, role: str, start: int, stop: int) -> Rows:
        """A copy of the request's stored rows for positions [start, stop) of one model."""
        if stop <= start or not request.table:
            return Rows.empty(self.kv_models[role].layout)
        return self.pool.stores[role].read(self.slots(request, start, stop))

    def write(self, role: str, slots: np.ndarray, rows: Rows, replay: int = 0) -> None:
        """Store rows at `slots`; the first `replay` keep their stored encoder state."""
        store = self.pool.stores[role]
        if replay:
            store.write(slots[:replay], rows.take(slice(0, replay)), encoder=False)
            rows = rows.take(slice(replay, None))
            slots = slots[replay:]
        store.write(slots, rows)

    def move_row(self, role: str, source: int, target: int) -> None:
        self.pool.stores[role].copy_slots(source, target)

    @property
    def writes(self) -> int:
        return self.pool.writes

    # -- a request's blocks -----------------------------------------------------------------

    def attach(self, request: Request, blocks: Iterable[int]) -> None:
        """Give a request that holds no rows the (cached) blocks of its restored prefix."""
        blocks = list(blocks)
        self.pool.hold(blocks)
        request.table = blocks

    def copies(self, request: Request) -> list[int]:
        """Indices of the request's blocks whose later rows it will write but someone else may
        read: copy them first."""
        firsts = {role: cursor[1] for role, cursor in request.cursors.items()}
        return self.pool.blocks_to_copy(request.table, firsts)

    def blocks_needed(
        self, request: Request, copies: list[int], stop: int
    ) -> tuple[int, list[int]]:
        """Blocks to take for the request's rows before position `stop` (a prefill chunk's end,
        or the pending position plus its speculative rows), and which of the table's blocks
        (of `copies`) those rows reach that must be copied first."""
        needed = -(-stop // self.block_size)
        shared = [index for index in copies if index < needed]
        return max(0, needed - len(request.table)) + len(shared), shared

    def take(self, request: Request, count: int, shared: list[int]) -> None:
        """Add `count` blocks to the request, first replacing each `shared` block by a copy."""
        fresh = self.pool.allocate(count)
        size = self.block_size
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

    def drop_after(self, request: Request, cursor: int) -> list[int]:
        """Release the blocks wholly after position `cursor` (speculative rows); returns them."""
        keep = -(-cursor // self.block_size)
        dropped = request.table[keep:]
        if dropped:
            self.pool.release(reversed(dropped))  # the tail first (see release_all)
            del request.table[keep:]
        return dropped

    def truncate(self, request: Request, cursor: int) -> list[int]:
        """Forget rows at and after `cursor`; returns the blocks released."""
        self.rewrites += 1
        if not request.table:
            return []
        if self.on_truncate is not None:
            self.on_truncate(request, cursor)
        for role in request.cursors:
            request.cursors[role] = [min(c, cursor) for c in request.cursors[role]]
        request.hashed = min(request.hashed, cursor // self.block_size)
        # The kept tail block's later rows stay sealed: the next write there goes to a copy,
        # so the undo history and any cache entry keep what they saw.
        return self.drop_after(request, cursor)

    def release_all(self, request: Request, *, rewritten: bool = False) -> list[int]:
        """Give back every block of the request; returns them."""
        if rewritten:
            self.rewrites += 1
        if self.on_release_all is not None:
            self.on_release_all(request)
        freed = request.table
        # The tail first: with a free queue, a request's last blocks (the least likely to be
        # shared by another prompt) are reused before its first ones.
        self.pool.release(reversed(freed))
        request.table = []
        request.hashed = 0
        return freed

    def keep_final(self, request: Request, window: int) -> FinishedRows:
        """A copy of what a finished request's committed state reads (its blocks go back)."""
        slots = self.slots(request, 0, request.committed())
        return self.pool.stores["target"].keep(slots, window)

    def seal(self, request: Request, start: int, stop: int, role: str = "target") -> None:
        """Mark one model's positions [start, stop) of the request as committed."""
        self.pool.seal(request.table, start, stop, role=role)

    def hash_full_blocks(self, request: Request, cursor: int, key: Callable[[], str]) -> None:
        """Chain a prefix hash over every newly filled block (blocks are immutable once full);
        the first block's chain starts from `key()`."""
        size = self.block_size
        hashes, table = self.pool.block_hash, request.table
        full = cursor // size
        previous = None
        for index in range(request.hashed, full):
            block = table[index]
            if previous is None:  # the chain starts from the key, or from the block before
                previous = key() if index == 0 else hashes[table[index - 1]]
            if hashes[block] is None:
                chunk = tuple(request.tokens[index * size : (index + 1) * size])
                hashes[block] = chain_hash(previous, chunk)
            previous = hashes[block]
        request.hashed = max(request.hashed, full)

    def cache_full_blocks(self, request: Request) -> None:
        """Offer the request's blocks full for every model to the prefix cache, after every
        commit and prefill chunk (the "blocks" policy caches them; "radix" inserts a chunk)."""
        if self.on_full is not None:
            self.on_full(request)

    # -- the prefix cache's blocks ----------------------------------------------------------

    def hold(self, blocks: Iterable[int]) -> None:
        self.pool.hold(blocks)

    def release(self, blocks: Iterable[int]) -> None:
        self.pool.release(blocks)

    def only_holder(self, blocks: Iterable[int]) -> int:
        """How many of `blocks` one release would free (their count is 1)."""
        return sum(1 for b in blocks if self.pool.refcount[b] == 1)

    # -- the undo history's blocks ----------------------------------------------------------

    def marks(self) -> PoolMarks:
        pool = self.pool
        return PoolMarks(
            pool.refcount.astype(np.int32),
            pool.free.copy(),
            list(pool.block_hash),
            pool.sealed.astype(np.int32),
            None if pool.free_queue is None else pool.free_queue.copy(),
        )

    def load(self, marks: PoolMarks) -> None:
        self.rewrites += 1
        pool = self.pool
        pool.refcount = marks.refcount.astype(np.int64)
        pool.free = marks.free.copy()
        pool.block_hash = list(marks.block_hash)
        pool.sealed = marks.sealed.astype(np.int64)
        if marks.free_queue is not None:
            pool.free_queue = marks.free_queue.copy()

    def save_rows(self, blocks: list[int]) -> SavedRows:
        slots = self._block_slots(blocks)
        return SavedRows(list(blocks), {r: s.read(slots) for r, s in self.pool.stores.items()})

    def load_rows(self, saved: SavedRows) -> None:
        self.rewrites += 1
        slots = self._block_slots(saved.blocks)
        for role, store in self.pool.stores.items():
            store.write(slots, saved.rows[role])

    def _block_slots(self, blocks: list[int]) -> np.ndarray:
        size = self.block_size
        return (np.array(blocks, dtype=np.int64)[:, None] * size + np.arange(size)).ravel()

    def keep_rows(self, block: int) -> None:
        """A cached block is about to be reused: the history may need its rows back."""
        if self.evicted_rows is not None:
            self.evicted_rows.append(self.save_rows([block]))

    def retain_into(self, released: list[int] | None) -> None:
        """Keep blocks released from now on out of the free list, in `released` (None: stop)."""
        self.pool.retain_releases = released is not None
        self.pool.released = [] if released is None else released

    def give_back(self, blocks: list[int]) -> None:
        self.pool.give_back(blocks)

    def free_unneeded(self, needed: set[int]) -> None:
        """Retained blocks that no history entry needs any more become free."""
        pool = self.pool
        for block in np.flatnonzero(~pool.free & (pool.refcount == 0)):
            if int(block) not in needed:
                pool.give_back([int(block)])

    # -- views ------------------------------------------------------------------------------

    def free_count(self) -> int:
        return self.pool.free_count()

    def is_free(self, block: int) -> bool:
        return bool(self.pool.free[block])

    def free_queue(self) -> list[int] | None:
        """Free blocks, the next one allocation takes first (None: no free queue)."""
        queue = self.pool.free_queue
        return None if queue is None else list(queue)

    def use_free_queue(self, on_reuse: Callable[[int], None]) -> None:
        self.pool.use_free_queue(on_reuse)

    def refcounts(self) -> list[int]:
        return self.pool.refcount.tolist()

    def hashes(self) -> list[str | None]:
        return self.pool.block_hash

    def states(self, tables: Iterable[list[int]], cached: set[int]) -> dict[int, str]:
        """Each used block's state: shared or committed (in a table), cached, or retained."""
        refcount = self.pool.refcount
        states: dict[int, str] = {}
        for table in tables:
            for block in table:
                states[block] = "shared" if refcount[block] > 1 else "committed"
        for block in cached:
            states.setdefault(block, "cached")
        for retained in np.flatnonzero(~self.pool.free & (refcount == 0)):
            states.setdefault(int(retained), "retained")
        return states

    def counts(self, cache_only: set[int]) -> PoolCounts:
        return self.pool.counts(cache_only)
