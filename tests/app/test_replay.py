"""Saved traces: they load back, re-execute to the same events, and report tampering."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui.replay import Replay
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.tracefile import (
    VERSION,
    TraceError,
    TraceFile,
    load_trace,
    parse_trace,
    trace_data,
)


@pytest.fixture(scope="module")
def busy_session() -> Session:
    """Every kind of operation: steps, cancel, rollback, undo, clock move and a submit."""
    session = Session(default_scenario())
    session.step()
    session.step()
    session.cancel("request-2")
    session.step()
    session.rollback("request-1", 2)
    session.step()
    session.undo()
    session.run()
    session.advance_clock()
    session.submit([5, 6, 7], max_tokens=3)
    session.run()
    return session


def _save(data: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def load_trace_from(session: Session) -> TraceFile:
    return parse_trace(json.loads(json.dumps(trace_data(session))), "memory")


def test_saved_trace_replays_to_identical_events(busy_session: Session, tmp_path: Path) -> None:
    trace = load_trace(_save(trace_data(busy_session), tmp_path / "t.trace.json"))
    replay = Replay(trace)
    assert replay.divergence is None and replay.reproduced
    assert len(replay.frames) == len(busy_session.operations) + 1
    # The last frame is the session as it was saved.
    final = replay.frames[-1]
    assert final.snapshot["tick"] == busy_session.engine.tick
    assert final.snapshot["requests"] == busy_session.snapshot()["requests"]
    assert [e["kind"] for e in final.log] == [e["kind"] for e in busy_session.log()]


def test_frames_are_labelled_and_navigable(busy_session: Session) -> None:
    replay = Replay(load_trace_from(busy_session))
    labels = [frame.label for frame in replay.frames]
    assert labels[0] == "start"
    assert labels[1] == "step"  # the header and the diff say which round it reached
    assert "cancel request-2" in labels
    assert "roll back request-1 by 2 tokens" in labels
    assert "undo" in labels
    assert any(re.fullmatch(r"clock \+[0-9.]+s", label) for label in labels)  # the move
    assert "submit user-1" in labels  # added by hand: named apart from the scenario
    assert replay.position == 0 and replay.current.label == "start"
    assert not replay.back()
    ticks = [replay.current.snapshot["tick"]]
    while replay.forward():
        ticks.append(replay.current.snapshot["tick"])
    assert len(ticks) == len(replay.frames) and replay.position == len(replay.frames) - 1
    assert not replay.forward()
    assert replay.back() and replay.position == len(replay.frames) - 2
    # Frames are independent: the start frame still shows the start.
    assert replay.frames[0].snapshot["tick"] == 0
    assert replay.seek(2).label == labels[2]
    with pytest.raises(ValueError, match="outside"):
        replay.seek(len(replay.frames))


def test_tampered_event_is_the_reported_divergence(busy_session: Session) -> None:
    data = trace_data(busy_session)
    index = next(i for i, e in enumerate(data["events"]) if e["kind"] == "commit")
    data["events"][index]["tokens"] = [31, 31, 31]
    replay = Replay(parse_trace(data, "tampered.json"))
    assert replay.divergence is not None and not replay.reproduced
    assert replay.divergence.startswith(f"event {index}:")
    assert "[31 31 31]" in replay.divergence  # what the trace claims
    assert "\n" not in replay.divergence


def test_tampered_detail_names_the_field(busy_session: Session) -> None:
    data = trace_data(busy_session)
    index = next(i for i, e in enumerate(data["events"]) if e["kind"] == "draft")
    data["events"][index]["nodes"][1]["prob"] = 0.123
    divergence = Replay(parse_trace(data, "tampered.json")).divergence
    assert divergence is not None
    assert f"event {index}:" in divergence and "nodes[1].prob" in divergence


@pytest.mark.parametrize(
    ("field", "value"), [("tokens", list(range(30)) * 10), ("kind", "x" * 5000)]
)
def test_a_long_tampered_event_names_the_field_in_a_short_message(
    busy_session: Session, field: str, value: Any
) -> None:
    """Two long sentences side by side (a long prompt's blocks) read as one huge line."""
    data = trace_data(busy_session)
    index = next(i for i, e in enumerate(data["events"]) if e["kind"] == "commit")
    data["events"][index][field] = value
    divergence = Replay(parse_trace(data, "tampered.json")).divergence
    assert divergence is not None and divergence.startswith(f"event {index}:")
    assert f" differs at {field}" in divergence and len(divergence) < 300, divergence


def test_a_last_bit_float_difference_still_reproduces(busy_session: Session) -> None:
    # Another machine's BLAS may round a probability differently in its last bits.
    data = trace_data(busy_session)
    index = next(i for i, e in enumerate(data["events"]) if e["kind"] == "draft")
    node = data["events"][index]["nodes"][1]
    node["prob"] = node["prob"] * (1 + 4e-16)
    assert Replay(parse_trace(data, "rounded.json")).reproduced
    node["prob"] = node["prob"] * (1 + 1e-6)
    assert "nodes[1].prob" in (Replay(parse_trace(data, "edited.json")).divergence or "")


def test_missing_operation_diverges(busy_session: Session) -> None:
    data = trace_data(busy_session)
    data["operations"].pop()  # the final step is gone: re-execution stops short
    replay = Replay(parse_trace(data, "short.json"))
    assert replay.divergence is not None and "re-execution ended" in replay.divergence


def test_impossible_operation_diverges(busy_session: Session) -> None:
    data = trace_data(busy_session)
    data["operations"].append({"op": "cancel", "id": "request-99"})
    replay = Replay(parse_trace(data, "extra.json"))
    assert replay.divergence is not None
    assert "request-99" in replay.divergence and "operation" in replay.divergence


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("tick", 999, "saved at tick 999; re-execution ends at tick"),
        ("clock", 123.5, "saved at clock 123.5s; re-execution ends at"),
        ("seed", 5, "seed differs: the trace records 5"),
    ],
)
def test_an_edited_position_or_seed_diverges(
    busy_session: Session, field: str, value: int, problem: str
) -> None:
    data = trace_data(busy_session)
    assert data[field] != value
    data[field] = value
    replay = Replay(parse_trace(data, "edited.json"))
    assert replay.divergence is not None and problem in replay.divergence


def _variant(busy_session: Session, change: Any) -> dict[str, Any]:
    data = trace_data(busy_session)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(format="something-else"), "not a deepinfer trace"),
        (lambda d: d.update(version=VERSION + 1), "newer"),
        (lambda d: d.update(version=0), "older"),
        (lambda d: d.update(version="one"), "version must be an integer"),
        (lambda d: d.pop("operations"), "missing field(s) operations"),
        (lambda d: d["operations"].append({"op": "jump"}), "operations["),
        (lambda d: d["operations"].append({"op": "cancel"}), "cancel needs id"),
        (lambda d: d.update(events=[{"tick": 0}]), "events[0]"),
        (lambda d: d["scenario"].update(seed=-1), "seed"),
        (lambda d: d["operations"].append({"op": "cancel", "id": ["x"]}), "id must be a string"),
        (
            lambda d: d["operations"].append({"op": "rollback", "id": "request-1", "tokens": -3}),
            "rollback tokens must be a positive integer, got -3",
        ),
        (
            lambda d: d["operations"].append({"op": "rollback", "id": "request-1", "tokens": True}),
            "got True",
        ),
        (
            lambda d: d["operations"].append({"op": "submit", "prompt": "1,2", "max_tokens": 2}),
            "prompt must be a list of integer token ids",
        ),
        (
            lambda d: d["operations"].append({"op": "submit", "prompt": [1], "max_tokens": "2"}),
            "max_tokens must be a non-negative integer",
        ),
        (lambda d: d["operations"].append({"op": []}), "unknown operation []"),
        (lambda d: d["operations"].append({"op": {"x": 1}}), "unknown operation"),
        (lambda d: d["operations"].append({"op": "clock", "seconds": -1}), "positive number"),
        (lambda d: d["operations"].append({"op": "clock", "seconds": "abc"}), "positive number"),
        (lambda d: d.update(tick=-1), "tick must be a non-negative integer"),
        (lambda d: d.update(clock="soon"), "clock must be a finite number"),
    ],
)
def test_bad_trace_documents_are_one_clear_line(
    busy_session: Session, tmp_path: Path, change: Any, problem: str
) -> None:
    path = _save(_variant(busy_session, change), tmp_path / "bad.trace.json")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert str(path) in message and problem in message and "\n" not in message


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file"), (b"{not json", "not valid JSON"), (b"\xff\xfe\x00", "not a text")],
)
def test_unreadable_files_are_one_clear_line(
    tmp_path: Path, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TraceError, match=problem):
        load_trace(path)
    with pytest.raises(TraceError, match="folder"):
        load_trace(tmp_path)


def test_different_build_is_reported_before_events(busy_session: Session) -> None:
    data = trace_data(busy_session)
    data["models"]["target"]["identity"] = "0123456789abcdef"
    divergence = Replay(parse_trace(data, "other-build.json")).divergence
    assert divergence is not None and "model identity differs" in divergence
    data = trace_data(busy_session)
    data["config"]["block_size"] = 8
    divergence = Replay(parse_trace(data, "edited.json")).divergence
    assert divergence is not None and "block_size" in divergence


def test_a_rollback_frame_names_the_tokens_it_removed() -> None:
    """Rolling back more tokens than a request generated stops at its prompt: the frame says
    how many went, and what was asked."""
    session = Session(default_scenario())
    for _ in range(3):
        session.step()
    (view,) = [r for r in session.snapshot()["requests"] if r["id"] == "request-1"]
    generated = len(view["generated"])
    assert 0 < generated < 100
    session.rollback("request-1", 100)
    labels = [frame.label for frame in Replay(load_trace_from(session)).frames]
    expected = f"roll back request-1 by {generated} token{'s' if generated != 1 else ''}"
    assert labels[-1] == f"{expected} (asked for 100)"


def test_a_session_at_any_frame_is_that_frame(busy_session: Session) -> None:
    """What the trace viewer exports for the frame on screen."""
    replay = Replay(load_trace_from(busy_session))
    for position in (0, 3, len(replay.frames) - 1):
        session = replay.session_at(position)
        assert session.snapshot() == replay.frames[position].snapshot
    with pytest.raises(ValueError, match="outside"):
        replay.session_at(len(replay.frames))


@pytest.mark.parametrize("tamper", [False, True])
def test_a_check_without_frames_judges_the_trace_the_same(
    busy_session: Session, tamper: bool
) -> None:
    data = trace_data(busy_session)
    if tamper:
        data["operations"].insert(3, {"op": "cancel", "id": "request-99"})
    with_frames = Replay(parse_trace(data, "t.json"))
    checked = Replay(parse_trace(data, "t.json"), frames=False)
    assert checked.frames == []  # a frame holds a whole snapshot: a check keeps none
    assert checked.divergence == with_frames.divergence
    assert checked.executed + 1 == len(with_frames.frames)
    assert checked.session.snapshot() == with_frames.session.snapshot()
