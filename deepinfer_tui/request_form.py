"""What the add-request form asks for, read from the text of its fields, and which field a
refusal is about. Textual-free: the screen collects the text and shows the refusal."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import SamplingParams

from .parsing import eos_problem, parse_int, parse_number, parse_optional_int, parse_tokens

DEFAULT_MAX_TOKENS = 8


@dataclass(frozen=True)
class NewRequest:
    """What the form asks for, as the session's submit takes it."""

    prompt: list[int]
    max_tokens: int = DEFAULT_MAX_TOKENS
    eos_id: int | None = None
    priority: int = 0
    sampling: dict[str, Any] | None = None  # SamplingParams' fields; None: greedy


# (SamplingParams' field, its label, placeholder); a field's id is its name, hyphenated.
SAMPLING_FIELDS = (
    ("temperature", "Temperature (0: greedy)", "0"),
    ("top_k", "Top-k (0: every token)", "0"),
    ("top_p", "Top-p, in (0, 1]", "1"),
    ("seed", "Seed", "drawn by the engine"),
)
_DECIMAL_FIELDS = ("temperature", "top_p")
# A refusal names its field first: "prompt: ...", "prompt[2] = 99 ...", "the EOS token id must".
_REFUSED_FIELD = re.compile(
    r"(?:the )?(?P<name>prompt|max new tokens|max_tokens|eos_id|eos|temperature|top_k|top_p|seed"
    r"|priority)\b",
    re.IGNORECASE,
)
_FIELD_IDS = {"max new tokens": "max-tokens", "max_tokens": "max-tokens", "eos_id": "eos"}
_ENGINE_INDEX = re.compile(r"\bprompt\[(\d+)\]")


def field_id(key: str) -> str:
    """A field's id: its SamplingParams name, hyphenated (top_k: top-k)."""
    return key.replace("_", "-")


def read_request(fields: Mapping[str, str], vocab_size: int) -> NewRequest:
    """The form's fields (their text, by field id; a missing one is empty) as the engine takes
    them; a ValueError in the form's own words otherwise. An empty field takes its default."""

    def text(name: str) -> str:
        return fields.get(name, "")

    try:
        prompt = parse_tokens(text("prompt"))
    except ValueError as error:
        raise ValueError(f"prompt: {error}") from None
    given = text("max-tokens")
    max_tokens = (
        parse_int(given, "max new tokens", minimum=0) if given.strip() else DEFAULT_MAX_TOKENS
    )
    eos_id = parse_optional_int(text("eos"), "EOS token id")
    problem = eos_problem(eos_id, vocab_size)
    if problem:
        raise ValueError(problem)
    given = text("priority")
    priority = parse_int(given, "priority") if given.strip() else 0
    return NewRequest(prompt, max_tokens, eos_id, priority, _read_sampling(text))


def _read_sampling(text: Callable[[str], str]) -> dict[str, Any] | None:
    """The sampling fields given, checked by SamplingParams (None: all empty, greedy)."""
    given: dict[str, Any] = {}
    for key, _, _ in SAMPLING_FIELDS:
        value = text(field_id(key))
        if value.strip():
            parse = parse_number if key in _DECIMAL_FIELDS else parse_int
            given[key] = parse(value, key)
    if not given:
        return None
    return SamplingParams(**given).to_dict()  # its own ValueError names the field


def refused_field(message: str) -> str | None:
    """The id of the field a refusal (the form's or the engine's) is about, if it names one
    first; None for a refusal of the request as a whole (the pool is too small)."""
    match = _REFUSED_FIELD.match(message)
    if match is None:
        return None
    name = match["name"].lower()
    return _FIELD_IDS.get(name, field_id(name))


def counted_from_one(message: str) -> str:
    """The form counts tokens from 1 (`token 3`); the engine indexes them (`prompt[2]`)."""
    return _ENGINE_INDEX.sub(lambda match: f"token {int(match[1]) + 1}", message)
