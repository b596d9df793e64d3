"""The prefix cache's door: publish a request's prefix, find one to restore, drop entries.

The cache (`cache.PrefixCache`) only keeps entries; this module holds and releases their blocks
and reports each change in the trace.
"""

from __future__ import annotations

from .blocks import BlockManager
from .cache import CacheEntry, Lookup, PrefixCache
from .config import EngineConfig
from .model import TinyModel
from .request import EventLog, Request


class Prefixes:
    def __init__(
        self,
        models: dict[str, TinyModel],
        config: EngineConfig,
        blocks: BlockManager,
        log: EventLog,
        counters: dict[str, int],
    ) -> None:
        self.models = models
        self.config = config
        self.blocks = blocks
        self.log = log
        self.counters = counters
        self.cache = PrefixCache(capacity=config.cache_capacity)

    def identities(self) -> dict[str, str]:
        return {role: model.identity for role, model in self.models.items()}

    def key(self) -> str:
        """Rows are reusable only between the same models and the same recovery mode."""
        identities = "+".join(m.identity for m in self.models.values())
        return f"{identities}|{self.config.recovery_mode}:{self.config.keep}"

    def drop_other_models(self) -> None:
        """Drop the entries of models since replaced (their keys could never match again)."""
        for entry in self.cache.remove_other_keys(self.key()):
            self.drop(entry, "model changed")

    def lookup(self, tokens: tuple[int, ...], now: float) -> Lookup:
        exact = self.config.recovery_mode == "exact"
        return self.cache.lookup(self.key(), tokens, now=now, exact=exact)

    def cached_length(self, tokens: tuple[int, ...], now: float) -> int:
        """Positions of `tokens` a restore would reuse now (no entry counts as used)."""
        exact = self.config.recovery_mode == "exact"
        return self.cache.lookup(self.key(), tokens, now=now, exact=exact, touch=False).reused

    def publish(self, request: Request, now: float) -> None:
        """Offer the request's stored prefix (every model's rows) to the cache."""
        boundary = min(min(c) for c in request.cursors.values())
        if boundary <= 0:
            return
        blocks = request.table[: -(-boundary // self.config.block_size)]
        ttls = (self.config.state_ttl, self.config.prefix_ttl)
        entry, evicted = self.cache.publish(
            self.key(), tuple(request.tokens[:boundary]), blocks, now=now, ttls=ttls
        )
        if evicted is not None:
            self.drop(evicted, "cache full")
        if entry is not None:
            self.blocks.hold(entry.blocks)
            self.log.emit(
                "publish",
                request.request_id,
                positions=boundary,
                blocks=list(entry.blocks),
                hot_until=entry.hot_until,
                warm_until=entry.warm_until,
            )

    def drop(self, entry: CacheEntry, why: str) -> None:
        self.blocks.release(entry.blocks)
        if why != "expired":
            self.counters["evictions"] += 1
        self.log.emit(
            "evict", None, positions=len(entry.tokens), blocks=list(entry.blocks), reason=why
        )

    def expire(self, now: float) -> None:
        for entry in self.cache.expire(now):
            self.drop(entry, "expired")

    def evict_for(self, deficit: int) -> int:
        """Evict least recently used entries until `deficit` blocks are freed (or none is
        left); returns the blocks still missing."""
        while deficit > 0:
            entry = self.cache.evict_lru()
            if entry is None:
                break
            deficit -= self.blocks.only_holder(entry.blocks)
            self.drop(entry, "evicted for space")
        return deficit

    def blocks_only_cached(self, tables: list[list[int]]) -> set[int]:
        held = {b for table in tables for b in table}
        return {b for b in self.cache.blocks() if b not in held}
