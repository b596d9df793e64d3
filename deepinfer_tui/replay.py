"""Replaying a saved trace: re-executing it frame by frame and checking it reproduces its events.

Re-execution is deterministic, so replaying a trace must reproduce its events; a difference
means the trace was edited, or this build computes something else. The file format itself
(writing, reading and validating a trace) is in `tracefile.py`; its names are importable from
here too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine import EngineConfig

from .describe import describe
from .diff_view import operation_words
from .parsing import clip
from .session import Session
from .tracefile import (
    FORMAT,
    REQUIRED_FIELDS,
    VERSION,
    TraceError,
    TraceFile,
    events_as_of,
    jsonable,
    load_trace,
    model_identities,
    parse_trace,
    trace_data,
)

__all__ = [
    "FORMAT",
    "REQUIRED_FIELDS",
    "VERSION",
    "Frame",
    "Replay",
    "TraceError",
    "TraceFile",
    "load_trace",
    "model_identities",
    "parse_trace",
    "trace_data",
]


@dataclass(frozen=True)
class Frame:
    """The session as it was after one operation (or at the start)."""

    label: str
    snapshot: dict[str, Any]
    log: Sequence[dict[str, Any]]  # a fixed-length view: frames share one merged log, no copies


def _safe_describe(event: Any) -> str:
    """describe(), tolerant of hand-edited events that lack fields."""
    try:
        return describe(event)
    except (KeyError, TypeError, ValueError, AttributeError):
        return json.dumps(event, sort_keys=True)[:160]


class Replay:
    """Re-executes a trace, keeping a frame after the start and after every operation.

    `divergence` is None when the re-executed events equal the recorded ones exactly;
    otherwise it describes the first difference in one line.
    """

    def __init__(self, trace: TraceFile, *, frames: bool = True) -> None:
        """`frames=False` only checks the trace: a frame keeps a whole snapshot, so a long
        trace's frames take far more memory than the session itself."""
        self.trace = trace
        try:
            self.session = Session(trace.scenario)
        except (ValueError, KeyError) as error:
            raise TraceError(f"{trace.source}: cannot rebuild its engine: {error}") from None
        self.frames: list[Frame] = [self._frame("start")] if frames else []
        self.executed = 0  # operations re-executed
        self.position = 0
        failure = self._execute()
        self.divergence: str | None = failure or self._compare()

    # -- navigation --------------------------------------------------------------------------

    @property
    def current(self) -> Frame:
        return self.frames[self.position]

    def forward(self) -> bool:
        if self.position + 1 >= len(self.frames):
            return False
        self.position += 1
        return True

    def back(self) -> bool:
        if self.position == 0:
            return False
        self.position -= 1
        return True

    def seek(self, position: int) -> Frame:
        if not 0 <= position < len(self.frames):
            raise ValueError(f"frame {position} is outside 0..{len(self.frames) - 1}")
        self.position = position
        return self.current

    def session_at(self, position: int) -> Session:
        """A fresh session re-executed up to frame `position` (frame 0: the start)."""
        if not 0 <= position < len(self.frames):
            raise ValueError(f"frame {position} is outside 0..{len(self.frames) - 1}")
        session = Session(self.trace.scenario)
        for operation in self.trace.operations[:position]:
            session.apply(operation)
        return session

    @property
    def reproduced(self) -> bool:
        return self.divergence is None

    # -- re-execution and comparison ---------------------------------------------------------

    def _frame(self, label: str, snapshot: dict[str, Any] | None = None) -> Frame:
        if snapshot is None:
            snapshot = self.session.snapshot()
        return Frame(label=label, snapshot=snapshot, log=self.session.log_view())

    def _execute(self) -> str | None:
        for index, operation in enumerate(self.trace.operations):
            before = self.frames[-1] if self.frames else None
            try:
                self.session.apply(operation)
            except (ValueError, KeyError) as error:
                message = error.args[0] if error.args else error
                return (
                    f"operation {index} ({operation.get('op')}) failed on re-execution: {message}"
                )
            self.executed += 1
            if before is None:
                continue
            snapshot = self.session.snapshot()
            label = operation_words(operation, before.snapshot, snapshot)
            self.frames.append(self._frame(label, snapshot))
        return None

    def _compare(self) -> str | None:
        if self.trace.seed != self.trace.scenario.seed:
            return (
                f"seed differs: the trace records {self.trace.seed}, its scenario (which the "
                f"run used) {self.trace.scenario.seed}"
            )
        recorded_models = {
            role: (m.get("identity") if isinstance(m, dict) else None)
            for role, m in self.trace.models.items()
        }
        rebuilt_models = {r: m.identity for r, m in self.session.engine.models.items()}
        if recorded_models != rebuilt_models:
            return (
                f"model identity differs: the trace recorded {recorded_models}, this build "
                f"computes {rebuilt_models}"
            )
        config = self.session.engine.config.to_dict()
        # A field newer than the trace was at its default when the trace was recorded.
        recorded = {**jsonable(EngineConfig().to_dict()), **self.trace.config}
        if jsonable(config) != recorded:
            changed = sorted(
                k for k in set(config) | set(recorded) if jsonable(config.get(k)) != recorded.get(k)
            )
            return f"config differs from the scenario's in {', '.join(changed)}"
        got = events_as_of(jsonable(self.session.log()), self.trace.version)
        expected = self.trace.events
        for index, (want, have) in enumerate(zip(expected, got)):
            if not same_value(want, have):
                return f"event {index}: {_difference(want, have)}"
        if len(got) != len(expected):
            index = min(len(got), len(expected))
            if len(got) < len(expected):
                return (
                    f"event {index}: expected {_safe_describe(expected[index])!r}, but "
                    f"re-execution ended after {len(got)} events"
                )
            extra = _safe_describe(got[index])
            return f"event {index}: re-execution produced an extra event {extra!r}"
        tick, clock = self.session.engine.tick, self.session.clock.now
        if self.trace.tick is not None and self.trace.tick != tick:
            return (
                f"the trace was saved at tick {self.trace.tick}; re-execution ends at tick {tick}"
            )
        if self.trace.clock is not None and self.trace.clock != clock:
            return (
                f"the trace was saved at clock {self.trace.clock:g}s; re-execution ends at "
                f"{clock:g}s"
            )
        return None


LONG_DESCRIPTIONS = 160  # characters of both sentences: longer, name the field that differs


def _difference(want: dict[str, Any], have: dict[str, Any]) -> str:
    expected_line, got_line = _safe_describe(want), _safe_describe(have)
    if expected_line != got_line and len(expected_line) + len(got_line) <= LONG_DESCRIPTIONS:
        return f"expected {expected_line!r}, got {got_line!r}"
    # The same sentence (the difference is in a detail describe() leaves out), or sentences
    # too long to read side by side (a long prompt's blocks): name the field that differs.
    path, expected, got = _first_difference(want, have, "")
    sentence = clip(expected_line, 80)
    return f"{sentence!r} differs at {path}: expected {_short(expected)}, got {_short(got)}"


_MISSING = "(missing)"
FLOAT_TOLERANCE = 1e-9  # relative: a probability may differ in its last bits across BLAS builds


def same_value(want: Any, have: Any) -> bool:
    """Equal, except that floats need only agree within FLOAT_TOLERANCE (a trace recorded on
    one machine replays on another whose floating point rounds differently in the last bit)."""
    if isinstance(want, float) or isinstance(have, float):
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (want, have))
        return numbers and math.isclose(
            want, have, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE
        )
    if isinstance(want, dict) and isinstance(have, dict):
        return want.keys() == have.keys() and all(same_value(want[k], have[k]) for k in want)
    if isinstance(want, list) and isinstance(have, list):
        return len(want) == len(have) and all(map(same_value, want, have))
    return want == have


def _first_difference(want: Any, have: Any, path: str) -> tuple[str, Any, Any]:
    """The path of the first differing leaf, e.g. "nodes[1].prob", and both values there."""
    if isinstance(want, dict) and isinstance(have, dict):
        for key in sorted(set(want) | set(have)):
            if not same_value(want.get(key, _MISSING), have.get(key, _MISSING)):
                where = f"{path}.{key}" if path else key
                return _first_difference(want.get(key, _MISSING), have.get(key, _MISSING), where)
    if isinstance(want, list) and isinstance(have, list):
        for index, (left, right) in enumerate(zip(want, have)):
            if not same_value(left, right):
                return _first_difference(left, right, f"{path}[{index}]")
        if len(want) != len(have):
            return f"{path} length", len(want), len(have)
    return path, want, have


def _short(value: Any, limit: int = 80) -> str:
    return clip(value if value is _MISSING else json.dumps(value, sort_keys=True), limit)
