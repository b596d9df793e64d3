"""The program as a whole: its entry points, its help, and launching the debugger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import assert_one_line_error, run, run_json


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


def test_help_never_breaks_the_export_folder_at_its_hyphen(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: at some widths `--help` wrapped `./deepinfer-exports/` after its hyphen."""
    for columns in range(50, 131):
        monkeypatch.setenv("COLUMNS", str(columns))
        for argv in (["--help"], ["export", "--help"]):
            code, out, _ = run(capsys, *argv)
            assert code == 0
            assert out.count("./deepinfer-exports/") == 1, (columns, argv)


@pytest.mark.parametrize("argv", [[], ["generate"], ["export"], ["guide"]])
def test_help_fits_the_terminal_and_keeps_every_word(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """Descriptions, examples and exit statuses are refilled to a narrow terminal (argparse
    printed them as written, 92 columns wide); at 250 columns they stay as written."""
    monkeypatch.setenv("COLUMNS", "250")
    wide = run(capsys, *argv, "--help")[1].split("\n\n", 1)[1]  # past argparse's usage
    assert max(len(line) for line in wide.splitlines()) > 80  # as written, wider than 80
    for columns in (50, 64, 80, 100):
        monkeypatch.setenv("COLUMNS", str(columns))
        narrow = run(capsys, *argv, "--help")[1].split("\n\n", 1)[1]
        assert all(len(line) <= columns for line in narrow.splitlines()), columns
        assert narrow.split() == wide.split(), columns  # the same words, in the same order
        assert narrow.count("\n\n") == wide.count("\n\n"), columns  # and paragraphs


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
