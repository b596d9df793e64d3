"""A scenario's timed events: their shape, and parsing one from its JSON object (a submit's
fields checked here; against the models and the pool in `scenario`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import SamplingParams, check_request_id

from .parsing import shown


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the problem."""


Fail = Callable[[str, str], ScenarioError]  # (where, problem) -> the error naming the file


@dataclass(frozen=True)
class ScenarioEvent:
    tick: int | None = None
    idle: bool = False
    submit: dict[str, Any] | None = None
    cancel: str | None = None
    clock: float | None = None
    note: str | None = None
    # A submit's request id: its own "id", or one `parse_scenario` chooses (so a request added
    # by hand can never take it first). Set for every submit; not written back out.
    request_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.tick is not None:
            data["tick"] = self.tick
        if self.idle:
            data["idle"] = True
        for name in ("submit", "cancel", "clock", "note"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data


def parse_event(raw: Any, index: int, fail: Fail) -> ScenarioEvent:
    where = f"events[{index}]"
    if not isinstance(raw, dict):
        raise fail(where, "must be an object")
    unknown = sorted(set(raw) - {"tick", "idle", "submit", "cancel", "clock", "note"})
    if unknown:
        raise fail(where, f"unknown field(s) {', '.join(unknown)}")
    tick = raw.get("tick")
    idle = raw.get("idle", False)
    if tick is not None and (isinstance(tick, bool) or not isinstance(tick, int) or tick < 0):
        raise fail(f"{where}.tick", f"must be a non-negative integer, got {shown(tick)}")
    if not isinstance(idle, bool):
        raise fail(f"{where}.idle", "must be true or false")
    if (tick is None) == (not idle):
        raise fail(where, 'needs exactly one of "tick" or "idle": true')
    submit = raw.get("submit")
    if submit is not None:
        submit = _parse_submit(submit, f"{where}.submit", fail)
    cancel = raw.get("cancel")
    if cancel is not None and not isinstance(cancel, str):
        raise fail(f"{where}.cancel", "must be a request id string")
    clock = raw.get("clock")
    if clock is not None and (
        isinstance(clock, bool)
        or not isinstance(clock, (int, float))
        or not clock >= 0
        or not math.isfinite(clock)  # 1e309 in JSON reads as infinity
    ):
        raise fail(
            f"{where}.clock", f"must be a non-negative number of seconds, got {shown(clock)}"
        )
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise fail(f"{where}.note", "must be a string")
    return ScenarioEvent(
        tick=tick,
        idle=idle,
        submit=submit,
        cancel=cancel,
        clock=None if clock is None else float(clock),
        note=note,
    )


def _parse_submit(submit: Any, where: str, fail: Fail) -> dict[str, Any]:
    """A submit's fields, shapes only (tokens are checked against the model later), with
    max_tokens filled in."""
    fields = {"id", "prompt", "max_tokens", "eos_id", "priority", "sampling"}
    if not isinstance(submit, dict) or set(submit) - fields:
        raise fail(
            where, "must be an object with prompt, max_tokens, eos_id, id, priority, sampling"
        )
    if submit.get("sampling") is not None:
        try:
            sampling_of(submit)  # SamplingParams' own checks, at load time
        except ValueError as error:
            raise fail(f"{where}.sampling", str(error)) from None
    if "prompt" not in submit:
        raise fail(where, "needs a prompt (a list of token ids)")
    named = submit.get("id")
    if named is not None:
        try:
            check_request_id(named)  # the engine's own rule, refused at load time
        except ValueError as error:
            raise fail(f"{where}.id", str(error)) from None
    max_tokens = submit.get("max_tokens", 8)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise fail(
            f"{where}.max_tokens", f"must be a non-negative integer, got {shown(max_tokens)}"
        )
    priority = submit.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise fail(f"{where}.priority", f"must be an integer, got {shown(priority)}")
    return {"max_tokens": max_tokens, **submit}


def sampling_of(submit: Mapping[str, Any]) -> SamplingParams | None:
    """A submit's sampling (None: greedy); ValueError naming the field if it is bad."""
    sampling = submit.get("sampling")
    return None if sampling is None else SamplingParams.from_dict(sampling)
