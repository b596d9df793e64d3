"""The saved-trace file format: a session as a versioned JSON document, and reading one back.

A trace holds what is needed to re-run a session exactly (scenario, which fixes models, config
and seed, plus the list of user operations) and what that run produced (every engine event and
session note). `replay.py` re-executes a trace and compares what it produces with it.

Schema (version 2), one JSON object:
    format      "deepinfer-trace"
    version     2 (a version-1 trace still loads: see EVENTS_ADDED)
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from engine import SamplingParams

from .jsonfile import read_json
from .scenario import Scenario, ScenarioError, parse_scenario
from .session import Session

FORMAT = "deepinfer-trace"
VERSION = 2
OLDEST_VERSION = 1
# What each version's engine added to the events: a replay of an older trace compares the events
# as that version recorded them (the kinds and fields it had), so old traces still prove a run.
EVENTS_ADDED: dict[int, tuple[frozenset[str], dict[str, frozenset[str]]]] = {
    2: (  # the token budget and chunked prefill (issue 22), the serving metrics (issue 25)
        frozenset({"schedule", "prefill"}),
        {
            "queued": frozenset({"priority", "clock"}),
            "preempt": frozenset({"kept_positions", "recompute_positions"}),
        },
    ),
}
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

Fail = Callable[[str], "TraceError"]  # a problem -> the error that names the file


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and the problem."""


def jsonable(value: Any) -> Any:
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
    return jsonable(
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
    version: int = VERSION


def load_trace(path: str | Path) -> TraceFile:
    data = read_json(path, "trace file", TraceError)
    return parse_trace(data, str(path))


def parse_trace(data: Any, source: str = "<trace>") -> TraceFile:
    """Validate a trace document completely; every problem is one TraceError line."""

    def fail(problem: str) -> TraceError:
        return TraceError(f"{source}: {problem}")

    _check_format(data, fail)
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        raise fail(f"missing field(s) {', '.join(missing)}")
    try:
        scenario = parse_scenario(data["scenario"], f"{source}: scenario")
    except ScenarioError as error:
        raise TraceError(str(error)) from None
    _check_settings(data, fail)
    _check_operations(data["operations"], fail)
    _check_events(data["events"], fail)
    tick, clock = data.get("tick"), data.get("clock")
    if tick is not None and not _is_int(tick, minimum=0):
        raise fail(f"tick must be a non-negative integer, got {tick!r}")
    if clock is not None and not _is_finite_number(clock):
        raise fail(f"clock must be a finite number of seconds, got {clock!r}")
    return TraceFile(
        source=source,
        scenario=scenario,
        config=data["config"],
        seed=data["seed"],
        models=data["models"],
        operations=data["operations"],
        events=data["events"],
        tick=tick,
        clock=None if clock is None else float(clock),
        version=data["version"],
    )


def _check_format(data: Any, fail: Fail) -> None:
    """A deepinfer trace object, of the version this build reads."""
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
    if version < OLDEST_VERSION:
        raise fail(
            f"trace version {version} is older than this deepinfer-tui reads (version "
            f"{OLDEST_VERSION} to {VERSION}); re-export it with the release that wrote it"
        )


def events_as_of(events: list[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """The events as a trace of `version` records them: kinds and fields added later left out."""
    kinds: set[str] = set()
    fields: dict[str, set[str]] = {}
    for added, (new_kinds, new_fields) in EVENTS_ADDED.items():
        if added > version:
            kinds |= new_kinds
            for kind, names in new_fields.items():
                fields.setdefault(kind, set()).update(names)
    if version >= VERSION:
        return events
    kept: list[dict[str, Any]] = []
    # A session note counts the engine events before it: count only those kept.
    kept_before = [0]
    for event in events:
        kind = event.get("kind")
        if kind == "note":
            index = event.get("trace_index")
            if isinstance(index, int) and 0 <= index < len(kept_before):
                event = {**event, "trace_index": kept_before[index]}
            kept.append(event)
            continue
        kept_before.append(kept_before[-1] + (kind not in kinds))
        if kind in kinds:
            continue
        dropped = fields.get(kind)  # type: ignore[arg-type]
        kept.append({k: v for k, v in event.items() if k not in dropped} if dropped else event)
    return kept


def _check_settings(data: dict[str, Any], fail: Fail) -> None:
    """The seed, config and models sections have the right types (values are compared later)."""
    seed = data["seed"]
    if not _is_int(seed):
        raise fail(f"seed must be an integer, got {seed!r}")
    if not isinstance(data["config"], dict):
        raise fail("config must be an object of engine settings")
    if not isinstance(data["models"], dict):
        raise fail("models must be an object of model identities")


def _check_operations(operations: Any, fail: Fail) -> None:
    if not isinstance(operations, list):
        raise fail("operations must be a list")
    for index, operation in enumerate(operations):
        _check_operation(operation, f"operations[{index}]", fail)


def _check_events(events: Any, fail: Fail) -> None:
    if not isinstance(events, list):
        raise fail("events must be a list")
    for index, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise fail(f"events[{index}] must be an object with a string kind")
        tick = event.get("tick")
        if not _is_int(tick):
            raise fail(f"events[{index}] needs an integer tick, got {tick!r}")


def _check_operation(operation: Any, where: str, fail: Fail) -> None:
    if not isinstance(operation, dict):
        raise fail(f"{where} must be an object with an op")
    op = operation.get("op")
    if not isinstance(op, str) or op not in _OPERATION_FIELDS:
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
        _check_submit(operation, where, fail)
    seconds = operation.get("seconds")
    if op == "clock" and not (_is_finite_number(seconds) and seconds > 0):
        raise fail(f"{where}: clock seconds must be a positive number, got {seconds!r}")


def _check_submit(operation: dict[str, Any], where: str, fail: Fail) -> None:
    prompt = operation["prompt"]
    if not isinstance(prompt, list) or not all(_is_int(token) for token in prompt):
        raise fail(f"{where}: submit prompt must be a list of integer token ids")
    if not _is_int(operation["max_tokens"], minimum=0):
        raise fail(
            f"{where}: submit max_tokens must be a non-negative integer, "
            f"got {operation['max_tokens']!r}"
        )
    sampling = operation.get("sampling")
    if sampling is not None and not isinstance(sampling, dict):
        raise fail(f"{where}: submit sampling must be an object of sampling settings")
    if sampling is not None:
        try:
            SamplingParams.from_dict(sampling)  # its own checks, at load rather than mid-replay
        except (TypeError, ValueError) as error:
            raise fail(f"{where}: submit sampling: {error}") from None
    if not _is_int(operation.get("priority", 0)):
        raise fail(f"{where}: submit priority must be an integer, got {operation['priority']!r}")
    eos_id = operation.get("eos_id")
    if eos_id is not None and not _is_int(eos_id):
        raise fail(f"{where}: submit eos_id must be an integer or null, got {eos_id!r}")


def _is_int(value: Any, minimum: int | None = None) -> TypeGuard[int]:
    """An int as JSON gives one (not a bool), at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return minimum is None or value >= minimum


def _is_finite_number(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
