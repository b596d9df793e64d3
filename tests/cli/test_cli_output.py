"""Output that cannot be written (a full disk, a closed pipe or stdout, export files) is exit
status 1 with one line, never a failure blamed on the input."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepinfer_tui.cli import main

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
