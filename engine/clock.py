"""The engine's clock: an injected callable returning seconds, read and checked."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


class Clock:
    def __init__(self, clock: Callable[[], float] | None) -> None:
        if clock is None:
            start = time.monotonic()
            clock = lambda: time.monotonic() - start  # noqa: E731
        elif not callable(clock):
            raise ValueError("clock must be a callable returning seconds")
        self.read_raw = clock
        self.offset = 0.0  # seconds a synthetic clock added to every reading

    def read(self) -> float:
        reading = self.read_raw()
        # Any real number (Fraction, Decimal, a 0-d array too); not text, a truth value or a
        # sequence, which float() would take or fail on without naming the clock.
        unreadable = isinstance(reading, (str, bytes, bool, np.bool_)) or (
            isinstance(reading, np.ndarray) and reading.ndim != 0
        )
        try:
            value = float(reading)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            unreadable = True
        if unreadable:
            raise ValueError(f"clock must return a number of seconds, got {reading!r}")
        if not np.isfinite(value):
            raise ValueError(f"clock returned a non-finite time {value!r}")
        return value + self.offset
