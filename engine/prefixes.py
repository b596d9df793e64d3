"""The prefix cache's door: publish a request's prefix, find one to restore, drop entries.

The scheduler and the engine call `Prefixes` alone; it dispatches to the configured policy
(`EngineConfig.cache_policy`, see docs/cache-policies.md):

- "ttl": `cache.PrefixCache` entries (hot cursors, warm encoder prefixes), this module's
  `TtlPolicy`;
- "blocks": vLLM's automatic prefix caching, `block_cache.BlockPolicy`;
- "radix": SGLang's radix tree, `radix.RadixPolicy`.

A policy keeps its state in `Prefixes.cache` (the undo history saves a copy of it), holds and
releases blocks through the block manager and reports each change in the trace.
"""

from __future__ import annotations

from typing import Any

from .block_cache import BlockPolicy
from .blocks import BlockManager, stored_positions
from .cache import CacheEntry, CacheState, Lookup, PrefixCache
from .config import EngineConfig
from .model import TinyModel
from .radix import RadixPolicy
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
        kinds = {"ttl": TtlPolicy, "blocks": BlockPolicy, "radix": RadixPolicy}
        self.policy = kinds[config.cache_policy](self)
        self.cache: CacheState = self.policy.empty()

    def identities(self) -> dict[str, str]:
        return {role: model.identity for role, model in self.models.items()}

    def key(self) -> str:
        """Rows are reusable only between the same models and the same recovery mode."""
        identities = "+".join(m.identity for m in self.models.values())
        return f"{identities}|{self.config.recovery_mode}:{self.config.keep}"

    def drop_other_models(self) -> None:
        """Drop what was cached for models since replaced (it could never match again)."""
        self.policy.drop_other_models()

    def lookup(self, tokens: tuple[int, ...], now: float) -> Lookup:
        """The longest usable cached prefix of `tokens` (a prompt but its last token)."""
        return self.policy.lookup(tokens, now)

    def cached_length(self, tokens: tuple[int, ...], now: float) -> int:
        """Positions of `tokens` a restore would reuse now; changes nothing (no entry counts
        as used, no radix node is split or touched)."""
        return self.policy.cached_length(tokens, now)

    def attach(self, request: Request, found: Lookup) -> None:
        """Give a request that holds no rows the blocks `found` (a lookup's) names."""
        if found.blocks:
            self.blocks.attach(request, found.blocks)
            self.policy.attached(request, found)

    def publish(self, request: Request, now: float) -> None:
        """Offer the request's stored prefix (every model's rows) to the cache: after its
        prompt, when it finishes, or (mid-prefill too) before it is preempted."""
        self.policy.publish(request, now)

    def expire(self, now: float) -> None:
        self.policy.expire(now)

    def evict_for(self, deficit: int) -> int:
        """Evict cached prefixes until `deficit` blocks are freed (or none is left); returns
        the blocks still missing."""
        return self.policy.evict_for(deficit)

    def blocks_only_cached(self, tables: list[list[int]]) -> set[int]:
        held = {b for table in tables for b in table}
        return {b for b in self.policy.held_blocks() if b not in held}

    def held_blocks(self) -> set[int]:
        """Blocks the cache holds a reference to."""
        return self.policy.held_blocks()

    def view(self, now: float) -> Any:
        """snapshot()["cache"]: the policy's entries, as plain data."""
        return self.policy.view(now)

    def pool_view(self) -> dict[str, Any]:
        """Keys the policy adds to snapshot()["pool"]."""
        return self.policy.pool_view()


class TtlPolicy:
    """DeepInfer's state cache: whole-prefix entries with hot and warm lifetimes."""

    def __init__(self, door: Prefixes) -> None:
        self.door = door

    @property
    def cache(self) -> PrefixCache:
        return self.door.cache  # type: ignore[return-value]

    def empty(self) -> PrefixCache:
        return PrefixCache(capacity=self.door.config.cache_capacity)

    def drop_other_models(self) -> None:
        for entry in self.cache.remove_other_keys(self.door.key()):
            self.drop(entry, "model changed")

    def cached_length(self, tokens: tuple[int, ...], now: float) -> int:
        exact = self.door.config.recovery_mode == "exact"
        key = self.door.key()
        return self.cache.lookup(key, tokens, now=now, exact=exact, touch=False).reused

    def lookup(self, tokens: tuple[int, ...], now: float) -> Lookup:
        exact = self.door.config.recovery_mode == "exact"
        found = self.cache.lookup(self.door.key(), tokens, now=now, exact=exact)
        if found.entry is None:
            return found
        size = self.door.config.block_size
        blocks = found.entry.blocks[: -(-found.reused // size)]
        return Lookup(found.cache, found.reused, found.entry, found.reason, blocks)

    def attached(self, request: Request, found: Lookup) -> None:
        pass

    def publish(self, request: Request, now: float) -> None:
        door, config = self.door, self.door.config
        stored = stored_positions(request)
        if stored <= 0:
            return
        blocks = request.table[: -(-stored // config.block_size)]
        ttls = (config.state_ttl, config.prefix_ttl)
        entry, evicted = self.cache.publish(
            door.key(), tuple(request.tokens[:stored]), blocks, now=now, ttls=ttls
        )
        if evicted is not None:
            self.drop(evicted, "cache full")
        if entry is not None:
            door.blocks.hold(entry.blocks)
            door.log.emit(
                "publish",
                request.request_id,
                positions=stored,
                blocks=list(entry.blocks),
                hot_until=entry.hot_until,
                warm_until=entry.warm_until,
            )

    def drop(self, entry: CacheEntry, why: str) -> None:
        door = self.door
        door.blocks.release(entry.blocks)
        if why != "expired":
            door.counters["evictions"] += 1
        door.log.emit(
            "evict", None, positions=len(entry.tokens), blocks=list(entry.blocks), reason=why
        )

    def expire(self, now: float) -> None:
        for entry in self.cache.expire(now):
            self.drop(entry, "expired")

    def evict_for(self, deficit: int) -> int:
        """Least recently used entries first, past those that would free no block now (a
        running request or a longer entry holds them all), as vLLM evicts only blocks nobody
        uses. If that is not enough, any entry: the requests holding its blocks may be
        preempted for the space next, and the entry would then keep the blocks from going back
        (a request that hit it and is preempted for itself would hit it again, forever)."""
        blocks = self.door.blocks

        def frees_now(entry: CacheEntry) -> bool:
            return blocks.only_holder(entry.blocks) > 0

        for wanted in (frees_now, lambda entry: True):
            while deficit > 0:
                entry = self.cache.evict_lru(wanted)
                if entry is None:
                    break
                deficit -= blocks.only_holder(entry.blocks)
                self.drop(entry, "evicted for space")
        return deficit

    def held_blocks(self) -> set[int]:
        return self.cache.blocks()

    def view(self, now: float) -> list[dict[str, Any]]:
        return [
            {
                "tokens": list(entry.tokens),
                "blocks": list(entry.blocks),
                "state": entry.state(now),
                "hot_until": entry.hot_until,
                "warm_until": entry.warm_until,
            }
            for _, entry in self.cache.items()
        ]

    def pool_view(self) -> dict[str, Any]:
        return {}
