"""Garbage-collector tuning while the app runs (process-wide, restored when it ends).

A keypress at 64 active requests allocates tens of thousands of short-lived objects (the
snapshot view, strips, segments). At CPython's default young-generation threshold (700) many
are still alive when a collection runs, get promoted, and soon trigger a collection of the
whole heap: 50-80 ms pauses every few keypresses. With a larger threshold they die young.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Protocol

GC_YOUNG_THRESHOLD = 10_000
# A keypress's collector pause ends with its frame, and at the latest after this many seconds.
GC_PAUSE_LIMIT = 1.0


class Stoppable(Protocol):
    def stop(self) -> object: ...


class CollectorTuning:
    def __init__(self) -> None:
        self._threshold: tuple[int, ...] | None = None  # the process's, while we run
        self._paused = False  # we disabled the collector until the next frame is painted
        self._limit: Stoppable | None = None

    @property
    def paused(self) -> bool:
        return self._paused

    def raise_threshold(self) -> None:
        self._threshold = gc.get_threshold()
        young, *older = self._threshold
        gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), *older)

    def restore(self) -> None:
        self.resume()
        if self._threshold is not None:
            gc.set_threshold(*self._threshold)
            self._threshold = None

    def pause_until_painted(
        self,
        after_refresh: Callable[[Callable[[], None]], bool],
        set_timer: Callable[[float, Callable[[], None]], Stoppable],
    ) -> None:
        """Hold garbage collection until the next frame is on screen.

        Collections that do happen during a keypress still cost it: a young collection
        traverses whatever the round has built so far (the snapshot alone is tens of thousands
        of objects), and every tenth one also traverses the older survivors (~10 ms). Paused
        from a key's action until its frame is painted, they run in the idle time after the
        frame instead. Nothing is skipped: the same objects are collected, only later.
        `after_refresh` and `set_timer` are the app's (Textual's call_after_refresh, set_timer).
        """
        if self._paused or not gc.isenabled():
            return  # already paused, or disabled by someone else (theirs to turn back on)
        gc.disable()
        self._paused = True
        if not after_refresh(self.resume):
            self.resume()  # the app is closing: no frame will follow
            return
        # A screen pushed and popped before the frame (the guide, say) can drop that callback:
        # the collector must never stay off for good.
        self._limit = set_timer(GC_PAUSE_LIMIT, self.resume)

    def resume(self) -> None:
        if self._limit is not None:
            self._limit.stop()
            self._limit = None
        if self._paused:
            self._paused = False
            gc.enable()
