"""Saved traces: the versioned JSON schema, loading it back, and re-executing it frame by frame.

A trace holds what is needed to re-run a session exactly (scenario, which fixes models, config
and seed, plus the list of user operations) and what that run produced (every engine event and
session note). Re-execution is deterministic, so replaying a trace must reproduce its events;
a difference means the trace was edited, or this build computes something else.

Schema (version 1), one JSON object:
    format      "deepinfer-trace"
    version     1
    scenario    Scenario.to_dict() (models, config, seed, timed events)
    config      the engine configuration the run used (EngineConfig.to_dict())
    seed        the scenario seed (must equal the scenario's)
    models      {role: {identity, vocab_size, width, depth, window}} for target (and draft)
    tick        engine tick when the trace was saved (re-execution must end there)
    clock       injected clock (seconds) when the trace was saved (likewise)
    operations  the session's operations, e.g. {"op": "step"}, {"op": "cancel", "id": ...}
    events      Session.log(): engine events and session notes, in order
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from engine import EngineConfig

from .describe import describe, plural
from .jsonfile import read_json
from .parsing import clip
from .scenario import Scenario, ScenarioError, parse_scenario
from .session import Session

FORMAT = "deepinfer-trace"
VERSION = 1
REQUIRED_FIELDS = ("scenario", "config", "seed", "models", "operations", "events")

# Fields every recorded operation needs, with a check and what to say when it fails.
_OPERATION_FIELDS: dict[str, tuple[str, ...]] = {
    "step": (),
    "undo": (),
    "cancel": ("id",),
    "rollback": ("id",),
    "submit": ("prompt", "max_tokens"),
    "clock": ("seconds",),
}


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and the problem."""


def _jsonable(value: Any) -> Any:
    """The value as JSON would give it back (tuples become lists, keys become strings)."""
    return json.loads(json.dumps(value, allow_nan=False))


def model_identities(session: Session) -> dict[str, dict[str, Any]]:
    return {
        role: {
            "identity": model.identity,
            "vocab_size": model.vocab_size,
            "width": model.width,
            "depth": model.depth,
            "window": model.window,
        }
        for role, model in session.engine.models.items()
    }


def trace_data(session: Session) -> dict[str, Any]:
    """The session as a version-1 trace document (plain JSON data)."""
    return _jsonable(
        {
            "format": FORMAT,
            "version": VERSION,
            "scenario": session.scenario.to_dict(),
            "config": session.engine.config.to_dict(),
            "seed": session.scenario.seed,
            "models": model_identities(session),
            "tick": session.engine.tick,
            "clock": session.clock.now,
            "operations": session.operations,
            "events": session.log(),
        }
    )


@dataclass(frozen=True)
class TraceFile:
    """A validated trace: enough to rebuild the session and check the re-execution."""

    source: str
    scenario: Scenario
    config: dict[str, Any]
    seed: int
    models: dict[str, Any]
    operations: list[dict[str, Any]]
    events: list[dict[str, Any]]
    # Where the saved session stood; re-execution must end there too (None: not recorded).
    tick: int | None = None
    clock: float | None = None


def load_trace(path: str | Path) -> TraceFile:
    data = read_json(path, "trace file", TraceError)
    return parse_trace(data, str(path))


def parse_trace(data: Any, source: str = "<trace>") -> TraceFile:
    """Validate a trace document completely; every problem is one TraceError line."""

    def fail(problem: str) -> TraceError:
        return TraceError(f"{source}: {problem}")

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        detail = f' (its format is "{found}")' if isinstance(found, str) else ""
        raise fail(f'not a deepinfer trace{detail}; expected "format": "{FORMAT}"')
    version = data.get("version")
    if not _is_int(version):
        raise fail(f"trace version must be an integer, got {version!r}")
    if version > VERSION:
        raise fail(
            f"trace version {version} is newer than this deepinfer-tui reads (version "
            f"{VERSION}); upgrade deepinfer-tui to open it"
        )
    if version < VERSION:
        raise fail(
            f"trace version {version} is older than this deepinfer-tui reads (version "
            f"{VERSION}); re-export it with the release that wrote it"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        raise fail(f"missing field(s) {', '.join(missing)}")
    try:
        scenario = parse_scenario(data["scenario"], f"{source}: scenario")
    except ScenarioError as error:
        raise TraceError(str(error)) from None
    seed = data["seed"]
    if not _is_int(seed):
        raise fail(f"seed must be an integer, got {seed!r}")
    if not isinstance(data["config"], dict):
        raise fail("config must be an object of engine settings")
    if not isinstance(data["models"], dict):
        raise fail("models must be an object of model identities")
    operations = data["operations"]
    if not isinstance(operations, list):
        raise fail("operations must be a list")
    for index, operation in enumerate(operations):
        _check_operation(operation, f"operations[{index}]", fail)
    events = data["events"]
    if not isinstance(events, list):
        raise fail("events must be a list")
    for index, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise fail(f"events[{index}] must be an object with a string kind")
        tick = event.get("tick")
        if not _is_int(tick):
            raise fail(f"events[{index}] needs an integer tick, got {tick!r}")
    tick, clock = data.get("tick"), data.get("clock")
    if tick is not None and not _is_int(tick, minimum=0):
        raise fail(f"tick must be a non-negative integer, got {tick!r}")
    if clock is not None and not _is_finite_number(clock):
        raise fail(f"clock must be a finite number of seconds, got {clock!r}")
    return TraceFile(
        source=source,
        scenario=scenario,
        config=data["config"],
        seed=seed,
        models=data["models"],
        operations=operations,
        events=events,
        tick=tick,
        clock=None if clock is None else float(clock),
    )


def _check_operation(operation: Any, where: str, fail: Any) -> None:
    if not isinstance(operation, dict):
        raise fail(f"{where} must be an object with an op")
    op = operation.get("op")
    if op not in _OPERATION_FIELDS:
        known = ", ".join(_OPERATION_FIELDS)
        raise fail(f"{where}: unknown operation {op!r} (known: {known})")
    missing = [name for name in _OPERATION_FIELDS[op] if name not in operation]
    if missing:
        raise fail(f"{where}: {op} needs {', '.join(missing)}")
    # The shapes the session's operations take; values a type check cannot judge (an unknown
    # id, a prompt longer than the pool) fail on re-execution, naming the operation.
    if op in ("cancel", "rollback") and not isinstance(operation["id"], str):
        raise fail(f"{where}: {op} id must be a string, got {operation['id']!r}")
    if op == "rollback" and not _is_int(operation.get("tokens", 1), minimum=1):
        raise fail(
            f"{where}: rollback tokens must be a positive integer, got {operation['tokens']!r}"
        )
    if op == "submit":
        prompt = operation["prompt"]
        if not isinstance(prompt, list) or not all(_is_int(token) for token in prompt):
            raise fail(f"{where}: submit prompt must be a list of integer token ids")
        if not _is_int(operation["max_tokens"], minimum=0):
            raise fail(
                f"{where}: submit max_tokens must be a non-negative integer, "
                f"got {operation['max_tokens']!r}"
            )
        eos_id = operation.get("eos_id")
        if eos_id is not None and not _is_int(eos_id):
            raise fail(f"{where}: submit eos_id must be an integer or null, got {eos_id!r}")
    seconds = operation.get("seconds")
    if op == "clock" and not (_is_finite_number(seconds) and seconds > 0):
        raise fail(f"{where}: clock seconds must be a positive number, got {seconds!r}")


def _is_int(value: Any, minimum: int | None = None) -> TypeGuard[int]:
    """An int as JSON gives one (not a bool), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return minimum is None or value >= minimum


def _is_finite_number(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


# -- re-execution ------------------------------------------------------------------------------


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


def _operation_label(
    operation: dict[str, Any], before: dict[str, Any], after: dict[str, Any], session: Session
) -> str:
    op = operation["op"]
    if op in ("step", "undo"):
        return f"{op} → t{session.engine.tick}"
    if op == "cancel":
        return f"cancel {operation['id']}"
    if op == "rollback":
        asked, request_id = operation.get("tokens", 1), operation["id"]

        def generated(snapshot: dict[str, Any]) -> int:
            views = (r for r in snapshot["requests"] if r["id"] == request_id)
            return next((len(r["generated"]) for r in views), 0)

        removed = generated(before) - generated(after)  # fewer than asked at the prompt
        label = f"roll back {request_id} by {plural(removed, 'token')}"
        return label if removed == asked else f"{label} (asked for {asked})"
    if op == "submit":
        known = {r["id"] for r in before["requests"]}
        added = [r["id"] for r in after["requests"] if r["id"] not in known]
        return f"submit {added[0]}" if added else "submit"
    if op == "clock":
        return f"clock → {session.clock.now:g}s"
    return str(op)


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
            label = _operation_label(operation, before.snapshot, snapshot, self.session)
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
        recorded = {**_jsonable(EngineConfig().to_dict()), **self.trace.config}
        if _jsonable(config) != recorded:
            changed = sorted(
                k
                for k in set(config) | set(recorded)
                if _jsonable(config.get(k)) != recorded.get(k)
            )
            return f"config differs from the scenario's in {', '.join(changed)}"
        got = _jsonable(self.session.log())
        expected = self.trace.events
        for index, (want, have) in enumerate(zip(expected, got)):
            if want != have:
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


def _first_difference(want: Any, have: Any, path: str) -> tuple[str, Any, Any]:
    """The path of the first differing leaf, e.g. "nodes[1].prob", and both values there."""
    if isinstance(want, dict) and isinstance(have, dict):
        for key in sorted(set(want) | set(have)):
            if want.get(key, _MISSING) != have.get(key, _MISSING):
                where = f"{path}.{key}" if path else key
                return _first_difference(want.get(key, _MISSING), have.get(key, _MISSING), where)
    if isinstance(want, list) and isinstance(have, list):
        for index, (left, right) in enumerate(zip(want, have)):
            if left != right:
                return _first_difference(left, right, f"{path}[{index}]")
        if len(want) != len(have):
            return f"{path} length", len(want), len(have)
    return path, want, have


def _short(value: Any, limit: int = 80) -> str:
    return clip(value if value is _MISSING else json.dumps(value, sort_keys=True), limit)
