"""Every command's --json output has the shape shapes.py defines (which the help and
docs/cli.md are written from): no field missing, none undocumented, and every field defined
seen in some real output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui.cli import demo, main
from deepinfer_tui.cli.shapes import SHAPES, Shape, field
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session


def problems(value: Any, shape: Shape, where: str, seen: set[str]) -> list[str]:
    """How `value` breaks `shape` (nothing: it conforms); records the fields it holds."""
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {value!r:.60}"]
    fields = {
        field(key)["name"]: (field(key), inner)
        for key, inner in shape.items()
        if key not in ("", "...")
    }
    found = [
        f"{where}: missing {name}"
        for name, (about, _) in fields.items()
        if name not in value and not about["optional"]
    ]
    if "..." not in shape:
        found += [f"{where}: undocumented {name}" for name in value if name not in fields]
    for name, (about, inner) in fields.items():
        if name not in value:
            continue
        seen.add(f"{where}.{name}")
        found += _field_problems(value[name], about, inner, f"{where}.{name}", seen)
    return found


def _field_problems(
    value: Any, about: dict[str, Any], inner: Any, where: str, seen: set[str]
) -> list[str]:
    if value is None:
        return [] if about["nullable"] else [f"{where}: null, but not nullable"]
    if about["list"]:
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {value!r:.60}"]
        if not isinstance(inner, dict):
            return []
        return [p for item in value for p in problems(item, inner, f"{where}[]", seen)]
    return problems(value, inner, where, seen) if isinstance(inner, dict) else []


def every_field(shape: Shape, where: str) -> set[str]:
    names = set()
    for key, inner in shape.items():
        if key in ("", "..."):
            continue
        about = field(key)
        path = f"{where}.{about['name']}"
        names.add(path)
        if isinstance(inner, dict):
            names |= every_field(inner, path + ("[]" if about["list"] else ""))
    return names


# Each form of every command's output, with its optional fields present and absent.
RUNS = {
    "demo": [["demo"], ["demo", "--trace"]],
    "generate": [
        ["generate", "--prompt", "1,2,3", "--prompt", "4,5", "--greedy"],
        ["generate", "--prompt", "1,2,3", "--prompt", "4,5", "--check", "--trace"],
    ],
    "bounded": [["bounded"]],
    "export": [["export", "--steps", "2", "--out", "{out}", "--format", "json"]],
    "replay": [["replay", "{out}/default-t0002.trace.json"]],
    "guide": [["guide", "--list"], ["guide", "01", "--lang", "zh"]],
}


def _outputs(capsys: pytest.CaptureFixture[str], argvs: list[list[str]], out: Path) -> list[Any]:
    outputs = []
    for argv in argvs:
        code = main([arg.replace("{out}", str(out)) for arg in argv] + ["--json"])
        printed, err = capsys.readouterr()
        assert code == 0, err
        outputs.append(json.loads(printed))
    return outputs


@pytest.mark.parametrize("command", list(SHAPES))
def test_json_output_has_the_documented_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    if command == "replay":
        assert main(["export", "--steps", "2", "--out", str(tmp_path), "--format", "json"]) == 0
        capsys.readouterr()
    outputs = _outputs(capsys, RUNS[command], tmp_path)
    forms = SHAPES[command]
    seen: set[str] = set()
    for data in outputs:
        assert next(iter(data)) == "command" and data["command"] == command
        # Each output is one of the command's forms (guide has two).
        attempts = [problems(data, shape, command, set()) for _, shape in forms]
        assert [] in attempts, min(attempts, key=len)
        shape = forms[attempts.index([])][1]
        problems(data, shape, command, seen)
    if command == "demo":  # the built-in scenario rolls nothing back: a stage that does
        stage_shape = SHAPES["demo"][0][1]["stages[]"]
        assert problems(_rolled_back_stage(), stage_shape, "demo.stages[]", seen) == []
    defined = set().union(*(every_field(shape, command) for _, shape in forms))
    assert defined - seen == set(), "fields defined but never in the output"


def _rolled_back_stage() -> dict[str, Any]:
    session = Session(default_scenario())
    while not any(r["can_rollback"] and r["generated"] for r in _requests(session)):
        session.step()
    running = next(r for r in _requests(session) if r["can_rollback"] and r["generated"])
    session.rollback(running["id"], 1)
    session.run()
    stage = demo.stage_summary(session, 1, session.log(), 0.0, with_events=True)
    assert stage["rollbacks"]
    return stage


def _requests(session: Session) -> list[dict[str, Any]]:
    return session.snapshot()["requests"]


def test_the_shape_checker_finds_a_missing_an_undocumented_and_a_null_field() -> None:
    shape: Shape = {"a": "x", "b[]": {"c": "y"}, "d?": "z", "e|null": "w"}
    assert problems({"a": 1, "b": [{"c": 2}], "e": None}, shape, "t", set()) == []
    assert problems({"b": [{"c": 2, "f": 3}], "e": 1, "g": 4}, shape, "t", set()) == [
        "t: missing a",
        "t: undocumented g",
        "t.b[]: undocumented f",
    ]
    assert problems({"a": None, "b": {}, "e": 1}, shape, "t", set()) == [
        "t.a: null, but not nullable",
        "t.b: expected a list, got {}",
    ]
