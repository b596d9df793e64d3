"""Work buffers: arrays a model reuses across forwards instead of allocating fresh ones.

Reusing the memory avoids page-faulting fresh zeroed pages on every call. A buffer grows on
demand, shrinks after long underuse and is dropped once no forward uses it; the padded
contexts (`padded.py`) keep rows in them across calls, recorded per buffer in `kept`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

import numpy as np

# A work buffer shrinks after this many calls in a row that use at most a quarter of it, and
# is dropped after this many forwards that do not use it.
SHRINK_AFTER = 32

Kept = dict[int, tuple[Hashable, int]]  # batch slot -> (context key, rows of it the slot holds)


class WorkBuffers:
    """One model's work buffers by name (and, per padded buffer, the rows it keeps)."""

    def __init__(self) -> None:
        self.calls = 0  # forwards so far (the clock of `drop_idle`)
        self.group = ""  # the length group being computed: its buffers' name suffix
        self._buffers: dict[str, np.ndarray] = {}
        self._kept: dict[str, Kept] = {}
        # Per buffer: consecutive calls that used at most a quarter of it (see `_shrink`), and
        # the forward call that last used it (one unused for long is dropped).
        self._underused: dict[str, int] = {}
        self._used_at: dict[str, int] = {}

    def start_forward(self) -> None:
        """Count a forward and forget buffers no forward used in the last SHRINK_AFTER: a long
        prefill's padded contexts are not read again once its request decodes on the chain
        path."""
        self.calls += 1
        for name, used in list(self._used_at.items()):
            if self.calls - used > SHRINK_AFTER:
                del self._used_at[name]
                self._buffers.pop(name, None)
                self._kept.pop(name, None)
                self._underused.pop(name, None)

    def clear(self) -> None:
        """Forget every buffer (after a failed or non-finite forward: masked padding is added
        to, so a NaN left in a buffer would leak into later, healthy batches)."""
        self._buffers.clear()
        self._kept.clear()
        self._underused.clear()
        self._used_at.clear()

    @contextmanager
    def in_group(self, suffix: str) -> Iterator[None]:
        """Name the buffers used inside after a length group: each keeps its own rows."""
        self.group = suffix
        try:
            yield
        finally:
            self.group = ""

    def kept(self, name: str) -> Kept:
        """The rows buffer `name` keeps per batch slot (named like the buffer, always)."""
        return self._kept.setdefault(name + self.group, {})

    def scratch(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A view of buffer `name` of `shape`. Rows a call does not write keep finite values
        from earlier calls; every read of them is masked."""
        name += self.group
        self._used_at[name] = self.calls
        buffer = self._buffers.get(name)
        fits = buffer is not None and all(have >= n for have, n in zip(buffer.shape, shape))
        if buffer is not None and fits and 4 * math.prod(shape) <= buffer.size:
            buffer = self._shrink(name, buffer, shape)
        else:
            self._underused.pop(name, None)
        if buffer is None or not fits:
            # Grow a short dimension to twice what is needed: a context gains rows every
            # round, and a fresh buffer costs page faults on first touch. The old contents
            # move along, so the padded rows kept stay valid (no round has to gather every
            # history again).
            if buffer is None:
                grown = shape
            else:
                old = buffer.shape
                grown = tuple(have if have >= need else 2 * need for have, need in zip(old, shape))
            fresh = np.zeros(grown)
            if buffer is not None:
                fresh[tuple(slice(0, have) for have in old)] = buffer
            buffer = self._buffers[name] = fresh
        return buffer[tuple(slice(0, need) for need in shape)]

    def _shrink(self, name: str, buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The buffer, or after SHRINK_AFTER calls in a row that used at most a quarter of
        it, a copy with room for twice what they need. One long request in a big batch grows
        the padded buffer to batch x its context; without this, that memory (hundreds of MB)
        stayed for the rest of the process. The wait keeps a batch whose sizes come and go
        from reallocating every round."""
        calls = self._underused[name] = self._underused.get(name, 0) + 1
        smaller = tuple(min(have, 2 * need) for have, need in zip(buffer.shape, shape))
        if calls < SHRINK_AFTER or 2 * math.prod(smaller) > buffer.size:
            return buffer
        del self._underused[name]
        fresh = np.zeros(smaller)
        fresh[...] = buffer[tuple(slice(0, n) for n in smaller)]
        # Padded rows kept for batch slots (dimension 0) over their first rows (dimension 2)
        # stay valid where the copy holds them.
        kept = self._kept.get(name)
        if kept is not None:
            slots, rows = smaller[0], smaller[2]
            for slot in [slot for slot in kept if slot >= slots]:
                del kept[slot]
            for slot, (key, count) in kept.items():
                kept[slot] = (key, min(count, rows))
        self._buffers[name] = fresh
        return fresh
