"""The command line, run in-process: exit codes, one-line errors, and the JSON shapes."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import engine.engine as engine_module
from deepinfer_tui import jsonfile
from deepinfer_tui.cli import main
from deepinfer_tui.scenario import default_scenario
from engine import TinyModel, greedy_generate


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["command"] == argv[0]
    return data


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2
    assert out == ""
    assert err.startswith("deepinfer-tui") and err.endswith("\n") and err.count("\n") == 1
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_real_entry_point_prints_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepinfer_tui", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for word in (
        "demo",
        "generate",
        "bounded",
        "export",
        "replay",
        "guide",
        "--scenario",
        "--trace",
        "--recovery-mode",
        "--export-dir",
    ):
        assert word in done.stdout


@pytest.mark.parametrize("command", ["demo", "generate", "bounded", "export", "replay", "guide"])
def test_every_command_documents_its_json(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and "JSON: {command" in out


# -- demo ----------------------------------------------------------------------------------------


def test_demo_passes_the_oracle_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert "tokens equal: yes" in out and "passed" in out
    for kind in ("cold", "hot", "warm"):
        assert f" {kind}: reused" in out
    assert "cancelled" in out


def test_demo_json_tells_the_scenario_stage_by_stage(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "demo", "--trace")
    assert set(data) == {"command", "scenario", "scope", "stages", "check", "metrics"}
    check = data["check"]
    assert check["passed"] and check["tokens_equal"] and check["checked"] == 5
    assert 0 <= check["max_state_error"] <= check["tolerance"] == 1e-10
    restores = [[r["cache"] for r in stage["restores"]] for stage in data["stages"]]
    # Shared prefix (cold then hot), hot reuse, warm recovery, cold miss: as the scenario says.
    assert restores == [["cold", "hot"], ["hot"], ["warm"], ["cold"]]
    results = [r for stage in data["stages"] for r in stage["results"]]
    assert {r["id"]: r["finish_reason"] for r in results}["request-3"] == "cancelled"
    assert sum(stage["speculation"]["rejected"] for stage in data["stages"]) > 0
    assert all(e["text"].startswith(f"t{e['tick']}") for s in data["stages"] for e in s["events"])


# -- generate ------------------------------------------------------------------------------------


def _oracle_tokens(prompt: list[int], max_tokens: int, eos: int | None = None) -> list[int]:
    scenario = default_scenario()
    model = TinyModel(seed=scenario.seed, **scenario.model)
    return list(greedy_generate(model, prompt, max_tokens=max_tokens, eos_id=eos).tokens)


def test_generate_matches_greedy_decoding(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys,
        "generate",
        "--prompt",
        "1,2,3",
        "--prompt",
        "4,5,6",
        "--max-tokens",
        "6",
        "--batch-budget",
        "4",
        "--check",
    )
    assert set(data) == {"command", "seed", "config", "models", "results", "metrics", "check"}
    assert data["config"]["max_batch_tokens"] == 4
    assert [r["id"] for r in data["results"]] == ["request-1", "request-2"]
    for result in data["results"]:
        assert set(result) == {
            "id",
            "prompt",
            "tokens",
            "finish_reason",
            "error",
            "accepted",
            "proposed",
        }
        assert result["tokens"] == _oracle_tokens(result["prompt"], 6)
        assert result["finish_reason"] == "length"
    assert data["check"]["passed"]


def test_generate_text_greedy_with_trace(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "generate", "--prompt", "1 2 3 4", "--greedy", "--trace")
    assert code == 0
    tokens = _oracle_tokens([1, 2, 3, 4], 8)
    assert "[" + " ".join(map(str, tokens)) + "]" in out
    assert "t1 request-1 restore cold" in out and "greedy, no draft model" in out


def test_generate_from_an_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    eos = _oracle_tokens([7, 8, 9], 4)[1]  # stop at the second token the oracle produces
    requests = [
        {"prompt": [7, 8, 9], "max_tokens": 4, "eos_id": eos, "id": "mine"},
        {"prompt": [1, 2], "max_tokens": 2},
    ]
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(requests), encoding="utf-8")
    data = run_json(capsys, "generate", "--input", str(path), "--check", "--trace")
    by_id = {r["id"]: r for r in data["results"]}
    assert by_id["mine"]["finish_reason"] == "stop"
    assert by_id["mine"]["tokens"] == _oracle_tokens([7, 8, 9], 4, eos)
    assert by_id["request-2"]["tokens"] == _oracle_tokens([1, 2], 2)
    assert data["check"]["passed"] and data["events"][0]["kind"] == "queued"


def test_generate_checks_the_pool_against_its_own_requests_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The built-in scenario's requests need more blocks than this pool has; generate runs
    # only the prompt given here, which fits in one block.
    scenario = default_scenario()
    block_size = scenario.config["block_size"]
    largest = max(
        len(e.submit["prompt"]) + e.submit["max_tokens"] for e in scenario.events if e.submit
    )
    assert largest > block_size
    data = run_json(
        capsys,
        "generate",
        "--prompt",
        "1",
        "--max-tokens",
        str(block_size - 1),
        "--num-blocks",
        "1",
    )
    assert data["results"][0]["tokens"] == _oracle_tokens([1], block_size - 1)


def test_bounded_recovery_fails_the_oracle_check(capsys: pytest.CaptureFixture[str]) -> None:
    # A prompt far longer than keep (8): with one new token, the last row still depends on
    # local context that mask recovery hides, so the state differs from the full recompute.
    prompt = ",".join(str(t) for t in range(3, 27))
    code, out, _ = run(
        capsys,
        "generate",
        "--prompt",
        prompt,
        "--recovery-mode",
        "mask",
        "--check",
        "--max-tokens",
        "1",
        "--json",
    )
    check = json.loads(out)["check"]
    assert code == 1 and not check["passed"]


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
        (["demo", "--bogus"], "--bogus"),
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


# -- bounded -------------------------------------------------------------------------------------


def test_bounded_experiment_compares_modes(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "bounded", "--length", "32", "--keep", "8")
    depth = default_scenario().model["depth"]
    assert data["consumer_rows"] == {"exact": 32 * depth, "mask": 32 * depth, "compact": 8 * depth}
    assert data["kept_from"] == 24 and len(data["tokens"]) == 32
    assert data["mask_compact_agree"] and data["mask_vs_compact_max_error"] <= 1e-10
    # An approximation: on this sequence the bounded rows really differ from exact ones.
    assert data["bounded_vs_exact_max_error"]["mask"] > 1e-6
    assert set(data["next_token"]) == {"exact", "mask", "compact"}
    assert "approximation" in data["note"]
    code, out, _ = run(capsys, "bounded")
    assert code == 0 and "approximations" in out


# -- export and replay ---------------------------------------------------------------------------


def test_export_then_replay_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = run_json(capsys, "export", "--steps", "3", "--out", str(tmp_path / "out"))
    assert data["tick"] == 3 and data["scenario"] == "default"
    names = sorted(Path(f).name for f in data["files"])
    assert names == sorted(
        f"default-t0003.{s}" for s in ("svg", "html", "txt", "trace.json", "perfetto.json")
    )
    trace = next(f for f in data["files"] if f.endswith(".trace.json"))
    code, out, _ = run(capsys, "replay", trace, "--check")
    assert code == 0 and "reproduced every recorded event" in out
    report = run_json(capsys, "replay", trace)
    assert report == {
        "command": "replay",
        "trace": trace,
        "scenario": "default",
        "operations": 3,
        "events": report["events"],
        "frames": 4,
        "reproduced": True,
        "divergence": None,
    }
    # Tampering with what was recorded is caught, named, and exits 1.
    saved = json.loads(Path(trace).read_text(encoding="utf-8"))
    commit = next(e for e in saved["events"] if e["kind"] == "commit")
    commit["tokens"] = [0, 0]
    Path(trace).write_text(json.dumps(saved), encoding="utf-8")
    code, out, _ = run(capsys, "replay", trace)
    assert code == 1 and "DIVERGED: event" in out and "[0 0]" in out


def test_export_with_settings_and_formats(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(
        capsys,
        "export",
        "--out",
        str(tmp_path),
        "--format",
        "txt,json",
        "--greedy",
        "--batch-budget",
        "2",
        "--undo-depth",
        "3",
    )
    assert code == 0 and "default-t" in out
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".txt"]
    trace = json.loads(next(tmp_path.glob("*.trace.json")).read_text(encoding="utf-8"))
    assert trace["config"]["max_batch_tokens"] == 2 and trace["scenario"]["draft"] is None
    assert trace["config"]["undo_depth"] == 3


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


# -- guide ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_guide_without_a_chapter_prints_the_index(
    capsys: pytest.CaptureFixture[str], lang: str
) -> None:
    code, out, _ = run(capsys, "guide", "--lang", lang)
    index = run_json(capsys, "guide", "00", "--lang", lang)
    assert code == 0 and out.startswith("# ") and out == index["text"]
    for chapter in run_json(capsys, "guide", "--list", "--lang", lang)["chapters"][1:]:
        assert chapter["slug"] in out  # the index links every chapter


def test_guide_lists_and_prints_chapters(capsys: pytest.CaptureFixture[str]) -> None:
    listing = run_json(capsys, "guide", "--list")
    chapters = listing["chapters"]
    assert listing["lang"] == "en" and chapters and chapters[0]["id"] == "00"
    assert set(chapters[0]) == {"id", "slug", "title"}
    chapter = run_json(capsys, "guide", chapters[0]["id"], "--lang", "zh")
    assert set(chapter) == {"command", "id", "slug", "title", "lang", "text"}
    assert chapter["lang"] == "zh" and chapter["text"].startswith("# ")
    code, out, _ = run(capsys, "guide", chapters[0]["id"])
    assert code == 0 and out.startswith(f"# {chapters[0]['title']}")
    code, out, _ = run(capsys, "guide", "--list", "--lang", "zh")
    assert code == 0 and chapters[0]["id"] in out


# -- launching the app ---------------------------------------------------------------------------


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


@pytest.mark.parametrize(
    ("file_name", "data"),
    [
        ("s.json", {"name": "n" * 200}),
        ("s.json", {"name": "\u00e9" * 200}),  # each byte-long in no file system's name
        ("x" * 230 + ".json", {}),  # the name is the file's
    ],
)
def test_a_long_scenario_name_still_exports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, file_name: str, data: dict[str, Any]
) -> None:
    path = tmp_path / file_name
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    exported = run_json(
        capsys, "export", "--scenario", str(path), "--steps", "1", "--out", str(out)
    )
    files = [Path(name) for name in exported["files"]]
    assert len(files) == 5 and all(f.is_file() and len(f.name) <= 100 for f in files)
    again = run_json(capsys, "export", "--scenario", str(path), "--steps", "1", "--out", str(out))
    # The same name gives the same stem: the second export is numbered after the first.
    stem = files[0].name.split(".")[0]
    assert Path(again["files"][0]).name.startswith(f"{stem}-2.")


def test_trace_cannot_be_mixed_with_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_json(capsys, "export", "--steps", "1", "--out", str(tmp_path), "--format", "json")
    trace = str(next(tmp_path.glob("*.trace.json")))
    for setting in (["--seed", "3"], ["--seed", "0"], ["--undo-depth", "0"], ["--greedy"]):
        result = run(capsys, "--trace", trace, *setting)
        assert_one_line_error(*result, "cannot be combined")


def test_launch_without_a_terminal_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    # pytest's captured stdin/stdout are not terminals, as in a CI job.
    assert_one_line_error(*run(capsys, "--greedy"), "interactive terminal", "demo")


def test_the_program_runs_numpy_with_one_blas_thread_unless_told_otherwise() -> None:
    """`python -m deepinfer_tui` sets OPENBLAS_NUM_THREADS=1 before NumPy loads, and keeps a
    value the user already chose."""
    probe = (
        "import os, runpy, sys; sys.argv = ['deepinfer-tui', '--help']\n"
        "try:\n    runpy.run_module('deepinfer_tui', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('threads=' + os.environ['OPENBLAS_NUM_THREADS'])"
    )
    for given, expected in ((None, "1"), ("2", "2")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if given is not None:
            env["OPENBLAS_NUM_THREADS"] = given
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
        )
        assert out.stdout.strip().endswith(f"threads={expected}")


def test_export_into_a_path_that_is_a_file_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "taken"
    path.write_text("not a folder", encoding="utf-8")
    code, out, err = run(capsys, "export", "--steps", "1", "--out", str(path))
    assert_one_line_error(code, out, err, str(path), "it is a file, not a folder")
    assert path.read_text(encoding="utf-8") == "not a folder"


def test_a_closed_stdin_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # what Python sets when started with `<&-`
    assert_one_line_error(*run(capsys, "--greedy"), "interactive terminal")


def test_the_real_program_with_stdin_closed_says_what_to_do() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepinfer_tui"],
        preexec_fn=lambda: os.close(0),  # closes only the child's stdin
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "interactive terminal" in done.stderr and "Traceback" not in done.stderr


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

    monkeypatch.setattr(engine_module.Engine, "__init__", no_memory)
    assert_one_line_error(
        *run(capsys, "generate", "--prompt", "1"), "not enough memory", "1.86 TiB"
    )


LOST_OUTPUT = "deepinfer-tui: cannot write the output (No space left on device)\n"

# Each command that prints, small outputs and large ones (those fail while the command runs,
# before the final flush); "{out}" is a folder of the test's own.
_PRINTING = [
    ["--help"],
    ["--version"],
    ["guide", "--list"],
    ["guide", "01"],
    ["generate", "--prompt", "1"],
    ["generate", "--prompt", "1", "--json"],
    ["demo"],
    ["demo", "--trace", "--json"],
    ["bounded"],
    ["export", "--steps", "2", "--out", "{out}"],
    ["replay", "{out}/default-t0002.trace.json", "--check"],
]


def _with_folder(argv: list[str], out: Path) -> list[str]:
    return [arg.replace("{out}", str(out)) for arg in argv]


@pytest.fixture(scope="module")
def exported_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding default-t0002.trace.json, for replay."""
    out = tmp_path_factory.mktemp("exports")
    assert main(["export", "--steps", "2", "--out", str(out), "--format", "json"]) == 0
    return out


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs a full device")
@pytest.mark.parametrize("argv", _PRINTING)
def test_output_lost_to_a_full_disk_is_a_failure(argv: list[str], exported_folder: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "deepinfer_tui", *_with_folder(argv, exported_folder)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    # Status 1: the output failed, the input was fine (status 2 would blame the input).
    assert (done.returncode, done.stderr) == (1, LOST_OUTPUT)


@pytest.mark.parametrize("argv", _PRINTING)
def test_output_that_cannot_be_written_in_process_is_status_1(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    exported_folder: Path,
) -> None:
    """Every write fails at once, so the command is still running when it does."""

    class FullStream(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(sys, "stdout", FullStream())
    assert main(_with_folder(argv, exported_folder)) == 1
    assert capsys.readouterr().err == LOST_OUTPUT


def test_a_reader_that_goes_away_is_status_1_and_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["demo"]) == 1
    assert capsys.readouterr().err == ""


def test_a_closed_stdout_is_a_failure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepinfer_tui", "demo"],
        preexec_fn=lambda: os.close(1),  # closes only the child's stdout
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "standard output is closed" in done.stderr


def test_output_that_cannot_be_flushed_in_process_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No file descriptor behind stdout (an embedding, a test): still one line, no raise."""

    class FullStream(io.StringIO):
        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(sys, "stdout", FullStream())
    assert main(["--version"]) == 1
    assert (
        capsys.readouterr().err
        == "deepinfer-tui: cannot write the output (No space left on device)\n"
    )


def test_export_files_that_cannot_be_written_are_status_1_and_leave_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A full disk while the files are written fails the output, not the input."""
    import deepinfer_tui.export as export

    real_temporary = export._write_temporary
    written: list[Path] = []

    def fill_up(path: Path, text: str) -> Path:
        if written:  # the second file finds the disk full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(real_temporary(path, text))
        return written[-1]

    monkeypatch.setattr(export, "_write_temporary", fill_up)
    assert main(["export", "--steps", "1", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("deepinfer-tui export: cannot write ") and "No space left" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_an_export_folder_that_cannot_be_made_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("x")
    assert main(["export", "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert "cannot create export folder" in capsys.readouterr().err
