"""Exports: well-formed documents, a trace that replays, a Perfetto file, all-or-nothing writes."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui.describe import describe
from deepinfer_tui.export import ALL_FORMATS, export_all, parse_formats
from deepinfer_tui.legend import BLOCK_MARKS, VERDICT_MARKS
from deepinfer_tui.perfetto import perfetto_trace
from deepinfer_tui.replay import Replay, load_trace
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.tree_view import node_label


def _session(steps: int | None = None) -> Session:
    session = Session(default_scenario())
    if steps is None:
        session.run()
    else:
        for _ in range(steps):
            session.step()
    return session


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Session, dict[str, Path]]:
    session = _session(steps=6)
    session.rollback("request-4", 1)  # a user operation in the middle of the scenario
    session.run()
    directory = tmp_path_factory.mktemp("exports") / "nested" / "folder"
    paths = export_all(session, directory)
    by_suffix = {p.name.split(".", 1)[1]: p for p in paths}
    return session, by_suffix


def test_files_are_named_by_scenario_and_tick(exported: tuple[Session, dict[str, Path]]) -> None:
    session, files = exported
    stem = f"default-t{session.engine.tick:04d}"
    assert sorted(p.name for p in files.values()) == sorted(
        f"{stem}.{suffix}" for suffix in ("svg", "html", "txt", "trace.json", "perfetto.json")
    )
    folder = next(iter(files.values())).parent
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in files.values())


def test_svg_parses_and_html_holds_every_request_and_log_line(
    exported: tuple[Session, dict[str, Path]],
) -> None:
    session, files = exported
    root = ET.parse(files["svg"]).getroot()
    assert root.tag.endswith("svg")
    page = files["html"].read_text(encoding="utf-8")
    text = files["txt"].read_text(encoding="utf-8")
    log_lines = [describe(event) for event in session.log()]
    assert len(log_lines) > 60  # far more than a screen shows: the document has all of it
    for request in session.snapshot()["requests"]:
        assert request["id"] in page and request["id"] in text
    # Long lines wrap at the document's width: compare with whitespace collapsed.
    page_words, text_words = " ".join(html.unescape(page).split()), " ".join(text.split())
    for line in log_lines:
        assert " ".join(line.split()) in page_words
        assert " ".join(line.split()) in text_words
    assert "<title>deepinfer-tui trace snapshot" in page


def _rejecting(snapshot: dict[str, Any]) -> dict[str, Any] | None:
    """A running request whose last draft tree has a rejected node, if any."""
    for request in snapshot["requests"]:
        nodes = (request["tree"] or {}).get("nodes", [])
        if request["blocks"] and any(n["verdict"] == "rejected" for n in nodes):
            return request
    return None


def test_document_shows_block_maps_and_draft_trees(tmp_path: Path) -> None:
    session = Session(default_scenario())
    while session.can_step() and _rejecting(session.snapshot()) is None:
        session.step()
    request = _rejecting(session.snapshot())
    assert request is not None, "the default scenario rejects a draft mid-request"
    (path,) = export_all(session, tmp_path, ["txt"])
    text = path.read_text(encoding="utf-8")
    for block in request["blocks"]:
        assert f"#{block['id']}" in text
    rejected = next(n for n in request["tree"]["nodes"] if n["verdict"] == "rejected")
    assert f"✗ {rejected['token']}" in text and f" target {rejected['target_token']}" in text
    assert node_label(rejected).plain in text  # the draft-tree pane's label
    assert "✓" in text and "free" in text
    # The pane's marks are named under the tree, as the help legend names them on screen.
    for verdict in ("accepted", "rejected", "discarded", "unverified"):
        assert f"{VERDICT_MARKS[verdict].symbol} {verdict}" in text


def test_document_draws_blocks_with_the_screens_symbols(tmp_path: Path) -> None:
    # The pool strip and its legend mean on paper what they mean on screen (the legend
    # module defines them once): a retained block is not drawn as the screen's free block.
    session = _session(steps=6)
    session.undo()  # keeps blocks retained for the undo history
    blocks = session.snapshot()["pool"]["blocks"]
    states = {block["state"] for block in blocks}
    assert {"retained", "free"} <= states
    (path,) = export_all(session, tmp_path, ["txt"])
    text = path.read_text(encoding="utf-8")
    assert "".join(BLOCK_MARKS[block["state"]].symbol for block in blocks) in text
    for state, mark in BLOCK_MARKS.items():
        assert f"{mark.symbol} {state}" in text


def test_json_trace_loads_back_and_replays_identically(
    exported: tuple[Session, dict[str, Path]],
) -> None:
    session, files = exported
    trace = load_trace(files["trace.json"])
    assert trace.operations == session.operations
    assert trace.models["target"]["identity"] == session.engine.target.identity
    replay = Replay(trace)
    assert replay.divergence is None
    assert replay.frames[-1].snapshot["requests"] == session.snapshot()["requests"]


def test_tampered_export_reports_the_divergence(
    exported: tuple[Session, dict[str, Path]], tmp_path: Path
) -> None:
    _, files = exported
    data = json.loads(files["trace.json"].read_text(encoding="utf-8"))
    index = next(i for i, e in enumerate(data["events"]) if e["kind"] == "restore")
    data["events"][index]["cache"] = "hot" if data["events"][index]["cache"] != "hot" else "cold"
    tampered = tmp_path / "tampered.trace.json"
    tampered.write_text(json.dumps(data), encoding="utf-8")
    divergence = Replay(load_trace(tampered)).divergence
    assert divergence is not None and divergence.startswith(f"event {index}:")


def _by_phase(events: list[dict[str, Any]], ph: str) -> list[dict[str, Any]]:
    return [e for e in events if e["ph"] == ph]


def test_perfetto_file_has_the_trace_event_shape(
    exported: tuple[Session, dict[str, Path]],
) -> None:
    session, files = exported
    data = json.loads(files["perfetto.json"].read_text(encoding="utf-8"))
    assert data["displayTimeUnit"] == "ms"
    events = data["traceEvents"]
    for event in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(event)
        assert isinstance(event["ts"], int) and event["ts"] >= 0
        assert event["ph"] in {"M", "X", "C", "i"}
    names = {e["args"]["name"] for e in _by_phase(events, "M") if e["name"] == "thread_name"}
    assert {r["id"] for r in session.snapshot()["requests"]} <= names
    slices = _by_phase(events, "X")
    assert all(isinstance(s["dur"], int) and s["dur"] > 0 for s in slices)
    rounds = [s for s in slices if s["name"].startswith("round t")]
    phases = [s for s in slices if s["name"] in {"restore", "draft", "verify", "commit"}]
    assert {p["name"] for p in phases} == {"restore", "draft", "verify", "commit"}
    for phase in phases:  # nested inside its request's round slice
        assert any(
            r["tid"] == phase["tid"]
            and r["ts"] <= phase["ts"]
            and phase["ts"] + phase["dur"] <= r["ts"] + r["dur"]
            for r in rounds
        )
    commits = [e for e in session.log() if e["kind"] == "commit"]
    assert len([p for p in phases if p["name"] == "commit"]) == len(commits)
    counters = _by_phase(events, "C")
    blocks = [c for c in counters if c["name"] == "blocks"]
    assert len(blocks) == session.engine.tick + 1  # the start, then after every round
    for counter in blocks:
        assert set(counter["args"]) == {"requests", "cached", "retained", "free"}
        assert sum(counter["args"].values()) == session.engine.config.num_blocks
    assert any(c["name"].startswith("acceptance") for c in counters)


def test_perfetto_counters_follow_undo() -> None:
    session = _session(steps=4)
    session.undo()
    session.undo()
    data = perfetto_trace(session)
    ticks = [c["ts"] // 1000 for c in data["traceEvents"] if c.get("name") == "blocks"]
    assert ticks == [0, 1, 2]


def test_export_is_deterministic_whatever_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = export_all(_session(steps=5), tmp_path / "a")
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("NO_COLOR", "1")
    second = export_all(_session(steps=5), tmp_path / "b")
    assert [p.name for p in first] == [p.name for p in second]
    for left, right in zip(first, second):
        assert left.read_bytes() == right.read_bytes(), left.name


def test_unwritable_folder_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="cannot create export folder") as caught:
        export_all(_session(steps=1), blocker / "exports")
    assert str(blocker / "exports") in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_failure_midway_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(steps=2)
    replace = os.replace

    def failing_replace(source: Any, target: Any) -> None:
        if str(target).endswith(".html"):  # after the SVG's rename succeeded
            raise PermissionError(13, "Permission denied")
        replace(source, target)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match=r"default-t0002\.html"):
        export_all(session, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_formats_are_validated() -> None:
    assert parse_formats("svg, HTML,svg") == ("svg", "html")
    assert parse_formats(",".join(ALL_FORMATS)) == ALL_FORMATS
    with pytest.raises(ValueError, match="unknown export format 'pdf'"):
        parse_formats("svg,pdf")
    with pytest.raises(ValueError, match="no export format"):
        parse_formats(" , ")


def test_export_works_without_textual() -> None:
    code = "import sys, deepinfer_tui.export, deepinfer_tui.cli; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_second_export_at_the_same_tick_keeps_the_first(tmp_path: Path) -> None:
    session = _session(steps=3)
    first = export_all(session, tmp_path)
    before = {path: path.read_bytes() for path in first}
    session.cancel("request-1")  # same tick, another state
    second = export_all(session, tmp_path)
    assert {p.name.split(".")[0] for p in second} == {f"default-t{session.engine.tick:04d}-2"}
    assert all(path.read_bytes() == data for path, data in before.items())
    assert "cancelled" in next(p for p in second if p.suffix == ".txt").read_text(encoding="utf-8")


def test_brackets_in_names_and_ids_are_text_not_markup(tmp_path: Path) -> None:
    scenario = parse_scenario(
        {
            "name": "[/]odd ../../name",
            "events": [
                {"tick": 0, "submit": {"id": "[/]x[bold]", "prompt": [1, 2], "max_tokens": 3}}
            ],
        }
    )
    session = Session(scenario)
    session.run()
    paths = export_all(session, tmp_path)
    assert all(path.parent == tmp_path for path in paths)  # no path from the scenario name
    text = next(p for p in paths if p.suffix == ".txt").read_text(encoding="utf-8")
    assert "[/]x[bold]" in text and "[/]odd ../../name" in text


def test_the_text_export_opens_with_the_scenario_description(
    exported: tuple[Session, dict[str, Path]],
) -> None:
    session, files = exported
    description = session.scenario.description
    assert description
    text = " ".join(files["txt"].read_text(encoding="utf-8").split())  # the grid wraps it
    assert f"scenario {description}" in text
    assert text.index(description) < text.index("tick · clock")


def test_the_text_export_names_the_unfinished_requests_by_what_they_are(tmp_path: Path) -> None:
    # The engine's queue holds every unfinished request, running ones too: not "queue".
    session = _session(steps=1)
    snapshot = session.snapshot()
    unfinished = [r["id"] for r in snapshot["requests"] if r["status"] != "finished"]
    assert any(r["status"] == "running" for r in snapshot["requests"])
    (txt,) = [p for p in export_all(session, tmp_path, formats=("txt",))]
    text = " ".join(txt.read_text(encoding="utf-8").split())
    assert f"finished · scheduling order {' '.join(unfinished)}" in text


def test_a_long_name_gives_short_distinct_stable_file_names(tmp_path: Path) -> None:
    def stems(name: str, folder: str) -> set[str]:
        session = Session(parse_scenario({"name": name}))
        paths = export_all(session, tmp_path / folder)
        assert len(paths) == len(ALL_FORMATS) and all(path.is_file() for path in paths)
        return {path.name.split(".")[0] for path in paths}

    long = ("a-very-long-scenario-name " * 8)[:199] + "1"  # the longest name allowed
    (first,) = stems(long, "one")
    assert first.startswith("a-very-long-scenario-name-") and first.endswith("-t0000")
    assert len(first) <= 64 + len("-t0000")
    assert stems(long, "again") == {first}  # the same name, the same file names
    assert stems(long[:199] + "2", "other") != {first}  # differs only after the cut


def test_perfetto_counters_come_from_the_session_without_re_executing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = _session(steps=5)
    session.undo()
    session.rollback("request-1", 1)
    session.advance_clock(2.0)
    session.run()
    # What the counters show: the metrics a fresh re-execution reads after each operation.
    fresh = Session(session.scenario)
    expected = {0: fresh.engine.metrics()}
    for operation in session.operations:
        fresh.apply(operation)
        if operation["op"] == "undo":
            expected = {t: m for t, m in expected.items() if t <= fresh.engine.tick}
        expected[fresh.engine.tick] = fresh.engine.metrics()

    def no_re_execution(*_: Any) -> None:
        raise AssertionError("the export re-executed the session")

    monkeypatch.setattr(Session, "apply", no_re_execution)
    counters = [c for c in perfetto_trace(session)["traceEvents"] if c.get("name") == "blocks"]
    assert [c["ts"] // 1000 for c in counters] == sorted(expected)
    for counter in counters:
        blocks = expected[counter["ts"] // 1000]["blocks"]
        assert counter["args"]["free"] == blocks["free"]
        assert counter["args"]["cached"] == blocks["cached"]
