"""The "blocks" cache policy: automatic prefix caching as vLLM v1 does it.

Every full block has a hash chained over its parent's hash and its tokens, starting from the
cache key (the models' identities and the recovery layout): `BlockManager.hash_full_blocks`.
A block is cached (its hash -> it in one dict) as soon as every model's rows in it are stored,
while its request still runs. A cached block holds no reference: once no request holds it, it
waits in the pool's free queue with its rows intact and can still be hit. Allocation takes the
queue's head (blocks go to its tail as they are freed, a request's tail blocks first), and a
cached block taken there is evicted at that moment. A lookup hashes the new prompt's full
blocks in order and stops at the first hash not in the dict: one probe per block, whatever
the number of cached blocks. The clock plays no part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .blocks import chain_hash, stored_positions
from .cache import Lookup, counted
from .request import Request

if TYPE_CHECKING:
    from .prefixes import Prefixes


def short(digest: str) -> str:
    """The form viewers show (the full digest is the cache's key)."""
    return digest[:8]


class BlockCache:
    """The hash map: prefix hash -> the blocks cached under it, a lookup taking the first.
    Two blocks share a hash when a request recomputed a prefix another one cached meanwhile
    (or copied a block to write into it): both are cached, each evicted on its own. Tuples,
    so a checkpoint's copy of the dict shares them."""

    def __init__(self, by_hash: dict[str, tuple[int, ...]] | None = None) -> None:
        self.by_hash: dict[str, tuple[int, ...]] = {} if by_hash is None else by_hash

    def copy(self) -> BlockCache:
        return BlockCache(dict(self.by_hash))

    def has(self, digest: str | None, block: int) -> bool:
        return digest is not None and block in self.by_hash.get(digest, ())

    def add(self, digest: str, block: int) -> None:
        self.by_hash[digest] = (*self.by_hash.get(digest, ()), block)

    def remove(self, digest: str, block: int) -> None:
        kept = tuple(b for b in self.by_hash[digest] if b != block)
        if kept:
            self.by_hash[digest] = kept
        else:
            del self.by_hash[digest]

    def first(self, digest: str) -> int | None:
        blocks = self.by_hash.get(digest)
        return blocks[0] if blocks else None


class BlockPolicy:
    def __init__(self, door: Prefixes) -> None:
        self.door = door
        door.blocks.use_free_queue(self.reused)
        door.blocks.on_full = self.cache_full

    @property
    def cache(self) -> BlockCache:
        return self.door.cache  # type: ignore[return-value]

    def empty(self) -> BlockCache:
        return BlockCache()

    def reused(self, block: int) -> None:
        """Allocation took `block` from the free queue's head: a cached one is evicted."""
        digest = self.door.blocks.hashes()[block]
        if digest is not None and self.cache.has(digest, block):
            # A checkpoint's hash map still names it: undo writes these rows back.
            self.door.blocks.keep_rows(block)
            self.cache.remove(digest, block)
            self.door.counters["evictions"] += 1
            self.door.log.emit("block_evicted", None, block=block, hash=short(digest))

    def cache_full(self, request: Request) -> None:
        """Cache the request's blocks that every model has filled and none cached yet."""
        size = self.door.config.block_size
        full = min(stored_positions(request) // size, request.hashed)
        table, hashes, cache = request.table, self.door.blocks.hashes(), self.cache
        fresh: list[int] = []
        for index in range(full - 1, -1, -1):  # from the newest back to one cached already
            if cache.has(hashes[table[index]], table[index]):
                break
            fresh.append(index)
        for index in reversed(fresh):
            block = table[index]
            digest = hashes[block]
            assert digest is not None  # blocks below `hashed` all have one
            cache.add(digest, block)
            self.door.log.emit(
                "block_cached", request.request_id, block=block, index=index, hash=short(digest)
            )

    def lookup(self, tokens: tuple[int, ...], now: float) -> Lookup:
        size = self.door.config.block_size
        previous, found = self.door.key(), []
        for start in range(0, len(tokens) - size + 1, size):
            digest = chain_hash(previous, tuple(tokens[start : start + size]))
            block = self.cache.first(digest)
            if block is None:
                break
            found.append(block)
            previous = digest
        full = len(tokens) // size
        if not found:
            why = f"none of the prompt's {counted(full, 'full block')} is cached"
            if full == 0:
                why = "the prompt has no full block before its last token"
            return Lookup("cold", 0, None, why)
        # As vLLM admits a request only if the rest of its prompt fits: a hit that would be
        # preempted for space at once would keep its blocks from the request that needs them
        # (retained for undo, they come back each round to be hit again).
        room = self.door.blocks.free_count() - sum(map(self.door.blocks.is_free, found))
        needed = -(-(len(tokens) + 1) // size) - len(found)
        if room < needed:
            why = (
                f"{counted(len(found), 'cached block')} would hit, but the rest of the prompt "
                f"needs {counted(needed, 'block')} and {room} are free: computed afresh"
            )
            return Lookup("cold", 0, None, why)
        reused = len(found) * size
        reason = (
            f"{counted(len(found), 'cached block')} of {full} hit by hash: "
            f"{counted(reused, 'position')}"
        )
        return Lookup("hot", reused, None, reason, tuple(found))

    def cached_length(self, tokens: tuple[int, ...], now: float) -> int:
        return self.lookup(tokens, now).reused  # a lookup changes nothing here

    def attached(self, request: Request, found: Lookup) -> None:
        pass  # holding them took the hit blocks out of the free queue

    def publish(self, request: Request, now: float) -> None:
        self.cache_full(request)  # blocks are cached as they fill: this catches a late draft

    def expire(self, now: float) -> None:
        pass

    def evict_for(self, deficit: int) -> int:
        return deficit  # cached blocks nobody holds are free already

    def drop_other_models(self) -> None:
        pass  # their chains start from another key: they never hit and go as they are reused

    def held_blocks(self) -> set[int]:
        return set()

    def view(self, now: float) -> list[dict[str, Any]]:
        return []  # no entries: the cached blocks are in snapshot()["pool"]

    def pool_view(self) -> dict[str, Any]:
        return {
            "free_queue": self.door.blocks.free_queue(),
            "cached": sorted(
                (
                    {"block": block, "hash": short(digest)}
                    for digest, blocks in self.cache.by_hash.items()
                    for block in blocks
                ),
                key=lambda cached: cached["block"],
            ),
        }
