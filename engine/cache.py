"""Prefix cache over the block pool: hot cursors and warm encoder prefixes with separate TTLs.

An entry remembers a committed token prefix and the blocks holding its rows. While `now <
hot_until` the whole cursor is usable (every row and the next-token logits): restoring costs no
model rows. After that, until `warm_until`, only the encoder side (encoder K/V, source, shared
K/V) is trusted, and the consumers are replayed over it. Entries are keyed by the models'
identities and the recovery layout, so changed weights or a bounded layout never reuse state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol


class CacheState(Protocol):
    """What a cache policy keeps between rounds; a checkpoint keeps a copy."""

    def copy(self) -> CacheState: ...


@dataclass(frozen=True)
class CacheEntry:
    """Immutable, so a checkpoint shares entries instead of copying them (a refresh replaces
    its entry)."""

    tokens: tuple[int, ...]
    blocks: tuple[int, ...]
    key: str  # models + layout this entry's rows belong to
    hot_until: float
    warm_until: float
    published_at: float

    def is_hot(self, now: float) -> bool:
        return now < self.hot_until

    def state(self, now: float) -> str:
        """'hot', 'warm' or 'expired'. An expired entry still holds its blocks: the engine
        reads its clock when a round starts, and that round's expiry releases them."""
        if now >= self.warm_until:  # first: a state_ttl longer than prefix_ttl ends here too
            return "expired"
        return "hot" if self.is_hot(now) else "warm"


@dataclass(frozen=True)
class Lookup:
    """Outcome of a prefix lookup: which entry, how many positions, and why."""

    cache: str  # "hot" | "warm" | "cold"
    reused: int
    entry: CacheEntry | None
    reason: str
    # The blocks holding the reused positions' rows, for the request to hold.
    blocks: tuple[int, ...] = ()


def _fmt(t: float) -> str:
    return f"{t:g}s"  # seconds of the injected clock


def counted(count: int, noun: str) -> str:
    """'1 position', '3 positions' (reasons are read by people)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


class PrefixCache:
    def __init__(self, *, capacity: int) -> None:
        self.capacity = capacity
        # Least recently used first. A plain dict, not an OrderedDict: a checkpoint copies it
        # every round, and only a dict's copy keeps the keys' hashes (a key holds a whole token
        # prefix; rehashing one of 4096 tokens took ~40 us a round).
        self.entries: dict[tuple[str, tuple[int, ...]], CacheEntry] = {}

    def copy(self) -> PrefixCache:
        other = PrefixCache(capacity=self.capacity)
        other.entries = self.entries.copy()
        return other

    def _use(self, index: tuple[str, tuple[int, ...]], entry: CacheEntry) -> None:
        """Store `entry` at `index` as the most recently used."""
        self.entries.pop(index, None)
        self.entries[index] = entry

    def _pop_oldest(self) -> CacheEntry:
        return self.entries.pop(next(iter(self.entries)))

    def items(self) -> list[tuple[tuple[str, tuple[int, ...]], CacheEntry]]:
        return list(self.entries.items())

    def blocks(self) -> set[int]:
        return {b for entry in self.entries.values() for b in entry.blocks}

    def publish(
        self, key: str, tokens: tuple[int, ...], blocks: list[int], *, now: float, ttls: tuple
    ) -> tuple[CacheEntry | None, CacheEntry | None]:
        """Add or refresh an entry. Returns (new entry or None if refreshed, evicted entry)."""
        state_ttl, prefix_ttl = ttls
        index = (key, tokens)
        existing = self.entries.get(index)
        if existing is not None:
            refreshed = replace(
                existing,
                hot_until=now + state_ttl,
                warm_until=now + prefix_ttl,
                published_at=now,
            )
            self._use(index, refreshed)
            return None, None
        evicted = None
        if len(self.entries) >= self.capacity:
            evicted = self._pop_oldest()
        entry = CacheEntry(tokens, tuple(blocks), key, now + state_ttl, now + prefix_ttl, now)
        self.entries[index] = entry
        return entry, evicted

    def expire(self, now: float) -> list[CacheEntry]:
        """Drop entries whose encoder prefix has expired; the caller releases their blocks."""
        gone = [index for index, e in self.entries.items() if now >= e.warm_until]
        return [self.entries.pop(index) for index in gone]

    def remove_other_keys(self, key: str) -> list[CacheEntry]:
        """Remove every entry not keyed by `key` (made for other weights); the caller
        releases their blocks."""
        gone = [index for index in self.entries if index[0] != key]
        return [self.entries.pop(index) for index in gone]

    def evict_lru(self, frees: Callable[[CacheEntry], bool]) -> CacheEntry | None:
        """Remove and return the least recently used entry whose removal `frees` space (one
        whose blocks are all held elsewhere too would free nothing); None if there is none."""
        for index, entry in self.entries.items():
            if frees(entry):
                return self.entries.pop(index)
        return None

    def lookup(
        self, key: str, wanted: tuple[int, ...], *, now: float, exact: bool, touch: bool = True
    ) -> Lookup:
        """Longest usable cached prefix of `wanted` (hot preferred on a tie).

        In exact mode any prefix of an entry is usable, because a row depends only on the tokens
        at or before it. A bounded layout's rows depend on where its restore started, so there
        an entry is usable whole (a prompt that extends it) or for all that is wanted (the same
        prompt again, or a shorter one); never cut at a point neither request chose.
        """
        best: tuple[int, int, CacheEntry] | None = None
        for (entry_key, tokens), entry in self.entries.items():
            if entry_key != key or now >= entry.warm_until:
                continue
            common = _common_prefix(tokens, wanted)
            if not exact and common not in (len(tokens), len(wanted)):
                continue
            if common == 0:
                continue
            hot = entry.is_hot(now)
            rank = (common, int(hot))
            if best is None or rank > best[:2]:
                best = (common, int(hot), entry)
        if best is None:
            return Lookup("cold", 0, None, "no live cached prefix for these tokens")
        common, hot_rank, entry = best
        if touch:  # a restore uses the entry; a policy only asks how long the match is
            self._use((entry.key, entry.tokens), entry)
        positions = counted(common, "position")
        if hot_rank:
            reason = f"hot cursor over {positions}, alive until {_fmt(entry.hot_until)}"
            return Lookup("hot", common, entry, reason)
        reason = (
            f"hot cursor expired at {_fmt(entry.hot_until)}; encoder prefix of {positions} "
            f"alive until {_fmt(entry.warm_until)}"
        )
        return Lookup("warm", common, entry, reason)


def _common_prefix(left: tuple[int, ...], right: tuple[int, ...]) -> int:
    n = min(len(left), len(right))
    for i in range(n):
        if left[i] != right[i]:
            return i
    return n
