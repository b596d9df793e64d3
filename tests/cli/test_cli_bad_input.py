"""Bad input, for every command: one line on stderr naming the problem, exit status 2, and
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepinfer_tui import jsonfile
from engine import Engine

from .helpers import assert_one_line_error, run, run_json


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["generate", "--prompt", "1,x"], "token 2 must be a whole number, got 'x'"),
        (["generate", "--prompt", " "], "needs at least one token id"),
        (["generate", "--prompt", "1_0"], "token 1 must be a whole number, got '1_0'"),
        (["generate", "--prompt", "\u0661,\u0662"], "token 1 must be a whole number"),
        (["generate", "--prompt", "1" * 30], "token 1 has more than 18 digits"),
        (
            ["generate", "--prompt", "1", "--max-tokens", "1_0"],
            "expected a whole number, got '1_0'",
        ),
        (
            ["generate", "--prompt", "1", "--num-blocks", " 4_8 "],
            "--num-blocks: expected a whole number",
        ),
        (["generate", "--prompt", "1,,2"], "a comma with no token id next to it"),
        (["generate", "--prompt", "-1,2"], "if its value starts with '-', write --prompt=VALUE"),
        (["generate", "--prompt=-1,2"], "-1 is outside the vocabulary"),
        (["generate", "--prompt", "1,2,"], "a comma with no token id next to it"),
        (["generate", "--prompt", "1,99"], "outside the vocabulary"),
        (["generate"], "--prompt"),
        (["generate", "--prompt", "1", "--eos", "40"], "EOS token id must be in [0, 32), got 40"),
        (["generate", "--prompt", "1", "--max-tokens", "999"], "blocks"),
        (["generate", "--prompt", "1", "--batch-budget", "0"], "--batch-budget"),
        (["generate", "--prompt", "1", "--recovery-mode", "mask", "--keep", "2"], "keep=2"),
        (["generate", "--prompt", "1", "--input", "x.json"], "not allowed"),
        (["generate", "--input", "missing.json"], "missing.json: no such file"),
        (["bounded", "--keep", "2"], "must cover the local window"),
        (["bounded", "--length", "-3"], "--length"),
        (["export", "--format", "svg,pdf"], "unknown export format 'pdf'"),
        (["export", "--steps", "many"], "--steps"),
        (["replay"], "TRACE.json"),
        (["replay", "missing.trace.json"], "no such file"),
        (["guide", "42"], "42"),
        (["guide", "--list", "--lang", "fr"], "'fr'"),
        (["launch-missiles"], "invalid choice"),
        (["demo", "--bogus"], "deepinfer-tui demo: unrecognized arguments: --bogus"),
        (["export", "--steps", "1", "x"], "deepinfer-tui export: unrecognized arguments: x"),
        (["--bogus"], "deepinfer-tui: unrecognized arguments: --bogus"),
        (["--scenario", "missing.json"], "missing.json: no such file"),
        (["--trace", "missing.trace.json"], "no such file"),
        (["--batch-budget", "-1"], "--batch-budget"),
        # The app's own options, given before a command, would be silently ignored.
        (["--greedy", "generate", "--prompt", "1"], "a command's options go after it"),
        (["--seed", "3", "export", "--steps", "1"], "deepinfer-tui export --seed"),
        (["--num-blocks", "4", "demo"], "'demo' has no --num-blocks"),
        (["--export-dir", "x", "guide"], "'guide' has no --export-dir"),
        (["--export-dir", "deepinfer-exports", "demo"], "'demo' has no --export-dir"),
        (["--export-dir", "x", "export"], "the folder given by --out (deepinfer-tui export --out"),
        (["--trace", "t.json", "demo"], "deepinfer-tui replay FILE"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert_one_line_error(*run(capsys, *argv), fragment)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{oops", "not valid JSON"),
        ('{"prompt": [1]}', "non-empty JSON list"),
        ('[{"prompt": "1,2"}]', "request 1: prompt must be a list"),
        ('[{"prompt": [1], "colour": 3}]', "unknown field(s) colour"),
        ('[{"max_tokens": 3}]', "needs a prompt"),
        ('[{"prompt": [1], "id": "a"}, {"prompt": [2], "id": "a"}]', "used twice"),
        ('[{"prompt": [1], "id": "x\\u0007y"}]', "request 1: request_id 'x\\x07y' contains U+0007"),
    ],
)
def test_malformed_request_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "requests.json"
    path.write_text(content, encoding="utf-8")
    assert_one_line_error(*run(capsys, "generate", "--input", str(path)), str(path), problem)


def test_export_into_a_file_path_fails_cleanly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run(capsys, "export", "--steps", "1", "--out", str(blocker / "sub"))
    assert_one_line_error(*result, "cannot create export folder")


def test_trace_with_a_newer_version(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run_json(capsys, "export", "--steps", "1", "--out", str(tmp_path), "--format", "json")
    trace = next(tmp_path.glob("*.trace.json"))
    data = json.loads(trace.read_text(encoding="utf-8"))
    data["version"] = 99
    trace.write_text(json.dumps(data), encoding="utf-8")
    assert_one_line_error(*run(capsys, "replay", str(trace)), "version 99 is newer")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{broken", "not valid JSON"),
        ('{"config": {"max_batch_tokens": 0}}', "max_batch_tokens"),
        ('{"events": [{"tick": 0, "cancel": "ghost"}]}', "ghost"),
        (
            '{"events": [{"tick": 0, "submit": {"id": "a", "prompt": [1]}}, '
            '{"tick": 1, "submit": {"prompt": [2]}}, {"tick": 2, "submit": {"id": "a", '
            '"prompt": [3]}}]}',
            "events[2].submit.id: 'a' is already the id of events[0]",
        ),
        ('{"events": [{"tick": 0, "submit": {"id": "", "prompt": [1]}}]}', "non-empty string"),
        ('{"events": [{"tick": 0, "clock": 1e309}]}', "events[0].clock"),
        (
            '{"events": [{"tick": 2, "submit": {"prompt": [1], "eos_id": 999}}]}',
            "events[0].submit.eos_id: the EOS token id must be in [0, 32), got 999",
        ),
        ('{"events": [{"tick": 0, "submit": {"prompt": [1], "eos_id": true}}]}', "got True"),
        (
            '{"events": [{"tick": 0, "submit": {"id": "a\\u0000b", "prompt": [1]}}]}',
            "events[0].submit.id: request_id 'a\\x00b' contains U+0000",
        ),
        ('{"events": [{"tick": 0, "submit": {"id": "' + "x" * 65 + '", "prompt": [1]}}]}', "65"),
        ('{"name": "a/b\\n../c\\u202e"}', "name: 'a/b\\n../c\\u202e' contains U+000A"),
        ('{"description": {"a": 1}}', "description: must be a string, got {'a': 1}"),
        ('{"config": {"block_size": 0}}', ": config: block_size must be a positive integer"),
    ],
)
def test_malformed_scenario_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(content, encoding="utf-8")
    assert_one_line_error(*run(capsys, "--scenario", str(path)), str(path), problem)


def test_a_huge_value_in_a_scenario_is_not_echoed_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "scenario.json"
    for data in ({"name": "n" * 10_000}, {"config": {"recovery_mode": "r" * 10_000}}):
        path.write_text(json.dumps(data), encoding="utf-8")
        code, out, err = run(capsys, "export", "--scenario", str(path), "--out", str(tmp_path))
        assert_one_line_error(code, out, err, str(path))
        assert len(err) < len(str(path)) + 350  # the value cut short


def test_a_huge_prompt_is_not_echoed_whole(capsys: pytest.CaptureFixture[str]) -> None:
    prompt = ",".join(["1"] * 5000 + ["99"])
    code, out, err = run(capsys, "generate", "--prompt", prompt)
    assert_one_line_error(code, out, err, "outside the vocabulary")
    assert len(err) < 400
    code, out, err = run(capsys, "generate", "--prompt", prompt.replace("99", "x"))
    assert_one_line_error(code, out, err, "token 5001 must be a whole number, got 'x'")
    assert len(err) < 400


def test_export_into_a_path_that_is_a_file_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "taken"
    path.write_text("not a folder", encoding="utf-8")
    code, out, err = run(capsys, "export", "--steps", "1", "--out", str(path))
    assert_one_line_error(code, out, err, str(path), "it is a file, not a folder")
    assert path.read_text(encoding="utf-8") == "not a folder"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"description": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"seed": ' + "9" * 5000 + "}", "(a number longer than 4300 digits)"),
    ],
)
def test_json_that_python_cannot_hold_is_refused_with_the_file_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(content, encoding="utf-8")
    assert_one_line_error(*run(capsys, "--scenario", str(path)), str(path), problem)
    assert_one_line_error(*run(capsys, "generate", "--input", str(path)), str(path), problem)
    assert "set_int_max_str_digits" not in capsys.readouterr().err  # no advice about Python


def test_an_endless_or_huge_file_is_not_read_to_the_end(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonfile, "MAX_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 1000 + "1]", encoding="utf-8")
    assert_one_line_error(*run(capsys, "--scenario", str(path)), str(path), "too large")
    if Path("/dev/zero").exists():  # a device that never ends
        assert_one_line_error(*run(capsys, "replay", "/dev/zero"), "/dev/zero", "too large")


def test_settings_too_big_for_memory_are_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 1.86 TiB for an array")

    monkeypatch.setattr(Engine, "__init__", no_memory)
    assert_one_line_error(
        *run(capsys, "generate", "--prompt", "1"), "not enough memory", "1.86 TiB"
    )
