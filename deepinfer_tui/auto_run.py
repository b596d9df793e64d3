"""Auto-run (`r`): one round per timer tick until the session ends, the user pauses, or the
per-press limit; it waits, saying so, while a dialog is open or an export reads the session.
`+` and `-` step its interval through AUTO_RUN_WAITS, running or not.

The timer belongs to the app; `stop()` ends it, and a tick that finds the app closing stops
it instead of stepping, so no round is run or drawn on an app whose panes are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from textual.timer import Timer

from .bindings import AUTO_RUN_WAITS
from .widgets.view import ComputingRound


def next_wait(wait: float, *, faster: bool) -> float:
    """The next of AUTO_RUN_WAITS after `wait`, shorter or longer; ValueError at the end."""
    if faster:
        shorter = [w for w in AUTO_RUN_WAITS if w < wait]
        if not shorter:
            raise ValueError(f"auto-run is at its fastest: a round every {wait:g} s")
        return max(shorter)
    longer = [w for w in AUTO_RUN_WAITS if w > wait]
    if not longer:
        raise ValueError(f"auto-run is at its slowest: a round every {wait:g} s")
    return min(longer)


class AutoRunHost(Protocol):
    """What auto-run needs from the app."""

    @property
    def closing(self) -> bool: ...

    @property
    def computing(self) -> ComputingRound | None: ...

    @property
    def auto_waiting(self) -> str | None: ...

    def set_interval(self, interval: float, callback: Callable[[], object]) -> Timer: ...

    def can_step(self) -> bool: ...

    def step_once(self) -> bool: ...

    def refresh_view(self) -> None: ...

    def say_paused_at_limit(self, limit: int) -> None: ...


class AutoRun:
    def __init__(self, host: AutoRunHost) -> None:
        self._host = host
        self._timer: Timer | None = None
        self._limit = 0
        self._steps = 0  # rounds run since `r` was pressed
        self._shown_waiting: str | None = None  # what the header last said it waits for

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start(self, interval: float, limit: int) -> None:
        self.stop()
        self._steps, self._limit = 0, limit
        self._timer = self._host.set_interval(interval, self.tick)

    def retime(self, interval: float) -> None:
        """Run on at a new interval (a speed key), counting on towards the same limit."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = self._host.set_interval(interval, self.tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._shown_waiting = None

    def tick(self) -> None:
        """One timer tick: step a round, or wait, or stop (and say why when it is not done)."""
        host = self._host
        if self._timer is None:
            return  # stopped: a tick already on its way does nothing
        if host.closing:
            self.stop()
            return
        if host.computing is not None:
            return  # the round before is still being computed; the header says so
        waiting = host.auto_waiting  # a dialog is open or an export reads the session
        if waiting != self._shown_waiting:  # the header says so, and when it is over
            self._shown_waiting = waiting
            host.refresh_view()
        if waiting is not None:
            return
        if not host.can_step() or self._steps >= self._limit:
            self.stop()
            host.refresh_view()
            if host.can_step():  # the limit, not the end: say so, or it looks done
                host.say_paused_at_limit(self._limit)
            return
        self._steps += 1
        if not host.step_once():
            self.stop()
            host.refresh_view()
