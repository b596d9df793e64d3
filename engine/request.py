"""A request, its status, its id rules, and the typed events of the engine's trace.

Each request keeps its committed tokens (prompt + generated). The last committed token is
*pending*: its rows are computed as the root of the next round's verification, so one target
forward per round both extends the committed state and checks the draft tree. The request's
`cursors[role]` say how many leading positions have stored rows in the pool: the encoder side
(encoder K/V, source, shared K/V) and the consumer side (local K/V, logits) separately, because
a warm restore has the first without the second.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import numpy as np

from .config import EngineConfig, Result
from .model import TinyModel, is_integer
from .rows import FinishedRows
from .sampling import GREEDY, SamplingParams, check_sampling


class Status(StrEnum):
    """A StrEnum: it compares, prints and serialises as its plain value."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    request_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    eos_id: int | None
    tokens: list[int]
    status: Status = Status.QUEUED
    finish_reason: str | None = None
    error: str | None = None
    table: list[int] = field(default_factory=list)
    cursors: dict[str, list[int]] = field(default_factory=dict)  # role -> [encoder, consumer]
    admitted: int = 0  # admission order; 0 = holds no rows
    fresh: bool = False  # admitted this round: publish its prefix after the round
    local_lower: int = 0
    consumer_from: int = 0
    restore: dict[str, Any] | None = None
    accepted: int = 0
    proposed: int = 0
    confidences: list[float] = field(default_factory=list)
    tree: dict[str, Any] | None = None
    last_commit: dict[str, Any] | None = None
    final: FinishedRows | None = None  # what committed_state reads, copied out at finish
    preemptions: int = 0
    priority: int = 0  # the priority policy admits smaller values first
    arrival: int = 0  # submission order (ties of the priority policy)
    waiting_for: str | None = None  # why the last round did not run it (None: it ran)
    needs_blocks: int = 0  # free blocks it waits for (deferred for space), 0 once it has them
    hashed: int = 0  # leading blocks whose prefix hash is set
    # The models' identities its KV and generated tokens came from (None: nothing computed).
    identities: dict[str, str] | None = None
    # The table this map was made for, and the slot of every position it covers (an int: the
    # first slot, when the blocks are consecutive). Rebuilt only when the table changes.
    slot_map: tuple[list[int], np.ndarray | int] | None = None
    sampling: SamplingParams = GREEDY  # a sampled request's seed is set at submit

    @property
    def generated(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def remaining(self) -> int:
        return self.max_tokens - self.generated

    @property
    def finished(self) -> bool:
        return self.status == Status.FINISHED

    def cursor(self, role: str) -> list[int]:
        """[encoder, consumer]: how many leading positions of `role` have stored rows."""
        return self.cursors.get(role, [0, 0])

    def committed(self, role: str = "target") -> int:
        """Leading positions whose rows of `role` are stored in full (0 without blocks)."""
        return min(self.cursor(role)) if self.table else 0

    def copy(self, tokens: list[int] | None = None) -> Request:
        """A copy that shares nothing mutable, but for `tokens` if given."""
        other = object.__new__(Request)
        other.__dict__.update(self.__dict__)
        other.tokens = list(self.tokens) if tokens is None else tokens
        other.table = list(self.table)
        other.cursors = {role: list(c) for role, c in self.cursors.items()}
        other.confidences = list(self.confidences)
        return other

    def settings(self) -> dict[str, Any]:
        """Its settings as submitted: prompt, max_tokens, eos_id, priority, and for a sampled
        request its sampling (seed included: submit them back for the same tokens)."""
        return {
            "prompt": list(self.prompt),
            "max_tokens": self.max_tokens,
            "eos_id": self.eos_id,
            "priority": self.priority,
            **self.sampling.settings(),
        }

    def result(self) -> Result:
        return Result(
            self.request_id,
            self.prompt,
            tuple(self.tokens[len(self.prompt) :]),
            self.finish_reason or "",
            self.error,
            self.accepted,
            self.proposed,
        )


# -- events ---------------------------------------------------------------------------------

EventKind = Literal[
    "queued",
    "restore",
    "draft",
    "budget",
    "schedule",  # the round's rows per request, against the token budget
    "prefill",  # a prompt chunk
    "deferred",
    "preempt",
    "verify",
    "commit",
    "publish",
    "evict",
    "block_cached",  # the "blocks" cache policy
    "block_evicted",
    "insert",  # the "radix" cache policy
    "finished",
    "rollback",
    "step_aborted",
]
Event = dict[str, Any]  # {"tick", "kind", "request_id", ...the kind's fields}: JSON as it is

COUNTERS = (
    "hot",
    "warm",
    "cold",
    "proposed",
    "accepted",
    "verified",
    "target_forwards",
    "draft_forwards",
    "encoder_rows",
    "consumer_rows",
    "draft_rows",
    "preemptions",
    "evictions",
    "committed_tokens",
    "rolled_back_positions",
)


class EventLog:
    """The trace: every event since the engine was made, each stamped with its round."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.tick = 0

    def emit(self, kind: EventKind, request_id: str | None, **data: Any) -> Event:
        event = {"tick": self.tick, "kind": kind, "request_id": request_id, **data}
        self.events.append(event)
        return event

    def truncate(self, length: int) -> list[Event]:
        """Forget the events after the first `length`; returns them."""
        dropped = self.events[length:]
        del self.events[length:]
        return dropped


# -- request ids ----------------------------------------------------------------------------

MAX_REQUEST_ID_LENGTH = 64  # characters: ids are table columns, titles and file contents
# Control, format (bidi overrides, zero-width), surrogate and line/paragraph separators: each
# garbles a terminal line or an export, or cannot be encoded at all.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def shown(value: object) -> str:
    """repr() of a value for an error message, cut short (a bad id may be huge)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def label_problem(label: object, max_length: int) -> str | None:
    """Why `label` cannot name something shown on a line (None if it can): it must be a
    non-empty string of at most `max_length` characters, none of them unprintable. The
    problem reads after the label's own name ("request_id must be ...")."""
    if not isinstance(label, str) or not label.strip():
        return f"must be a non-empty string, got {shown(label)}"
    if len(label) > max_length:
        return f"{shown(label)} has {len(label)} characters; at most {max_length} are allowed"
    for char in label:
        if unicodedata.category(char) in _UNPRINTABLE:
            return (
                f"{shown(label)} contains U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
                + ": control, format, surrogate and line-separator characters are not allowed"
            )
    return None


def new_request(
    target: TinyModel,
    config: EngineConfig,
    num_blocks: int,
    taken: dict[str, Request],
    prompt: object,
    max_tokens: object,
    eos_id: object,
    request_id: object,
    priority: object = 0,
    sampling: object = None,
) -> Request:
    """A checked new request (ids not in `taken`); raises ValueError naming the bad field."""
    tokens = target.check_tokens(prompt, "prompt")
    if not is_integer(max_tokens) or max_tokens < 0:  # type: ignore[operator]
        raise ValueError(f"max_tokens must be a non-negative integer, got {max_tokens!r}")
    max_tokens = int(max_tokens)  # type: ignore[call-overload]
    if not is_integer(priority):
        raise ValueError(f"priority must be an integer, got {shown(priority)}")
    eos_id = target.check_eos_id(eos_id)
    sampling = check_sampling(sampling).seeded()
    if request_id is None:
        number = len(taken) + 1
        while f"request-{number}" in taken:
            number += 1
        request_id = f"request-{number}"
    request_id = check_request_id(request_id)  # a str, even from a NumPy string
    if request_id in taken:
        raise ValueError(f"request_id {request_id!r} is already in use")
    positions = len(tokens) + max_tokens
    blocks = -(-positions // config.block_size)
    if blocks > num_blocks:
        setting = "num_blocks" if config.num_blocks else "kv_cache_memory_mib"
        raise ValueError(
            f"request needs {blocks} blocks ({len(tokens)} prompt + {max_tokens} new "
            f"positions) but the pool has only {num_blocks}: raise {setting}"
        )
    request = Request(request_id, tokens, max_tokens, eos_id, list(tokens))
    request.priority, request.arrival = int(priority), len(taken)  # type: ignore[call-overload]
    request.sampling = sampling
    return request


def check_request_id(request_id: object) -> str:
    """Return `request_id` if it is a usable request id; else raise ValueError saying why."""
    problem = label_problem(request_id, MAX_REQUEST_ID_LENGTH)
    if problem is not None:
        raise ValueError(f"request_id {problem}")
    return str(request_id)  # label_problem checked it is one
