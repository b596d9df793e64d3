"""Read-only views of the session's growing log: a fixed-length window without copies, and
the check a reader makes that the events it took are still there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, overload

Event = dict[str, Any]


class LogView(Sequence[Event]):
    """A fixed-length, read-only view of the session's growing log (no copy per refresh)."""

    __slots__ = ("_events", "_length")

    def __init__(self, events: list[Event], length: int) -> None:
        self._events = events
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            # Copies only the slice, not the whole shared list first (a reader of the last
            # rounds would otherwise copy the entire log).
            start, stop, step = index.indices(self._length)
            if step == 1:
                return self._events[start:stop]
            return [self._events[i] for i in range(start, stop, step)]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("log index out of range")
        return self._events[index]


def log_still_holds(
    log: Sequence[Mapping[str, Any]], read: int, last: Mapping[str, Any] | None
) -> bool:
    """Whether `log` still starts with the `read` events a reader took from it before (`last`
    the last of them). A log only grows or loses its tail (undo, a replay frame back), so
    that one position tells; a reader takes a rewritten log again from the start.

    By identity, not equality: after an undo the engine may write an equal event at that
    position while an earlier one differs, and every view of one session shares its events.
    """
    if read == 0:
        return True
    return len(log) >= read and log[read - 1] is last
