"""Argument checks the model (and the engine's config) share, and the machine-memory guard."""

from __future__ import annotations

import os
from typing import TypeGuard

import numpy as np


def is_integer(value: object) -> TypeGuard[int | np.integer]:
    """An int or a NumPy integer, not a bool (True is an int to Python)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float | np.integer | np.floating]:
    """A real number, Python's or NumPy's, not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def positive_int(value: object, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def physical_memory() -> int | None:
    """Bytes of memory this machine has, where the system says (POSIX); else None."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(needed: int, what: str, hint: str = "") -> None:
    """Refuse `needed` bytes beyond the machine's memory, as a ValueError that starts with
    `what`, its `{size}` filled in ("a pool of 1024 positions needs {size} for its rows").
    Arrays made and written piece by piece are, with overcommitted memory, not a MemoryError
    but a process the system kills."""
    # Looked up through the package at call time: a test stands in for the machine by
    # replacing `engine.model.physical_memory`.
    from . import physical_memory as machine_memory

    memory = machine_memory()
    if memory is not None and needed > memory:
        size = f"{needed / 2**30:.3g} GiB"
        raise ValueError(
            f"{what.format(size=size)}, more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory{hint}"
        )
