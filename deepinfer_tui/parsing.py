"""Parsing what people type, into the app's forms or on the command line; each failure is a
ValueError naming the problem."""

from __future__ import annotations

import math
import re

_SEPARATORS = re.compile(r"\s*,\s*|\s+")  # a comma (spaces around it) or spaces


# ASCII digits only: int() would also take "1_0" and other scripts' digits ("٣"), which a
# person typing token ids or counts did not mean.
_WHOLE = re.compile(r"[+-]?[0-9]+")
MAX_DIGITS = 18  # far beyond any count or id here, and within int64


def whole_number(text: str) -> int | None:
    """`text` (spaces around it allowed) as a whole number of at most MAX_DIGITS digits;
    None if it is not one."""
    cleaned = text.strip()
    if not _WHOLE.fullmatch(cleaned) or len(cleaned.lstrip("+-")) > MAX_DIGITS:
        return None
    return int(cleaned)


def parse_int(text: str, what: str, *, minimum: int | None = None) -> int:
    value = whole_number(text)
    if value is None:
        shown = text.strip()
        if _WHOLE.fullmatch(shown):
            raise ValueError(f"{what} has more than {MAX_DIGITS} digits")
        shown = shown if len(shown) <= 24 else shown[:24] + "…"
        raise ValueError(f"{what} must be a whole number, got {shown!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


# A decimal number as people type one: 0.8, .5, 1e-3 (ASCII only, as for whole numbers).
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_number(text: str, what: str) -> float:
    """A finite decimal number; ValueError naming `what` otherwise."""
    cleaned = text.strip()
    if not _DECIMAL.fullmatch(cleaned):
        raise ValueError(f"{what} must be a number, got {clip(cleaned, 25)!r}")
    value = float(cleaned)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{what} must be a finite number, got {cleaned!r}")
    return value


def parse_tokens(text: str) -> list[int]:
    """Token ids separated by commas and/or spaces, e.g. `1,2,3` or `1 2 3`."""
    parts = _SEPARATORS.split(text.strip())
    if not any(parts):
        raise ValueError("needs at least one token id, e.g. 1,2,3")
    if not all(parts):  # "1,,2" or "1,2,": a token left out by mistake, not skipped quietly
        raise ValueError("a comma with no token id next to it")
    return [parse_int(part, f"token {index + 1}") for index, part in enumerate(parts)]


def parse_optional_int(text: str, what: str) -> int | None:
    return None if not text.strip() else parse_int(text, what)


def eos_problem(eos_id: object, vocab_size: int) -> str | None:
    """Why `eos_id` is not an EOS token id of this vocabulary; None if it is one (or None)."""
    if eos_id is None:
        return None
    if isinstance(eos_id, bool) or not isinstance(eos_id, int) or not 0 <= eos_id < vocab_size:
        return f"the EOS token id must be in [0, {vocab_size}), got {eos_id!r}"
    return None


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, keeping its start and end (where a message
    says what the problem is): a value from a file may be megabytes long."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, its end cut to an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: object, limit: int = 40) -> str:
    """repr() of a value for an error message, at most `limit` characters."""
    return clip(repr(value), limit)
