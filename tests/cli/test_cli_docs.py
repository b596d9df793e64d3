"""docs/cli.md, the command line's reference: its generated parts match the program, and
every command line it shows runs with the exit status and output it describes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui import __version__, guide
from deepinfer_tui.cli import main
from deepinfer_tui.cli.program import COMMANDS, EXAMPLES
from deepinfer_tui.scenario import default_scenario
from engine import TinyModel, greedy_generate

from .reference import DOC, generated_parts, regenerate

TEXT = DOC.read_text(encoding="utf-8")
ROOT = DOC.parents[1]
TRACE = "deepinfer-exports/default-t0005.trace.json"


def _shown_command_lines(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _shown_files(text: str) -> dict[str, str]:
    """The files the page shows (`name.json`: then a JSON block), which its commands use."""
    return dict(re.findall(r"`([\w.-]+\.json)`:\n\n```json\n(.*?)```", text, re.S))


def test_the_generated_parts_match_the_program() -> None:
    expected = {"exit-statuses", "flags app", "flags engine"}
    for command in COMMANDS:
        name = command.__name__.rsplit(".", 1)[-1]
        expected |= {f"flags {name}", f"json {name}"}
    assert sorted(generated_parts(TEXT)) == sorted(expected)
    assert regenerate(TEXT) == TEXT, "docs/cli.md is stale: run python -m tests.cli.reference"


def test_the_help_examples_are_on_the_page() -> None:
    shown = set(_shown_command_lines(TEXT))
    for arguments, _ in EXAMPLES:
        assert f"deepinfer-tui {arguments}".rstrip() in shown


# -- running what the page shows -----------------------------------------------------------------


@dataclass
class Ran:
    code: int
    out: str
    err: str
    folder: Path
    apps: list[dict[str, Any]] = field(default_factory=list)  # what each debugger opened on

    def json(self) -> dict[str, Any]:
        return json.loads(self.out)


def _oracle(prompt: list[int], max_tokens: int) -> list[int]:
    scenario = default_scenario()
    model = TinyModel(seed=scenario.seed, **scenario.model)
    return list(greedy_generate(model, prompt, max_tokens=max_tokens).tokens)


def _opened(ran: Ran, scenario: str, *, greedy: bool = False, replay: bool = False) -> None:
    assert ran.code == 0, ran.err
    assert ran.apps == [{"scenario": scenario, "greedy": greedy, "replay": replay}]


def _app_default(ran: Ran) -> None:
    _opened(ran, "default")


def _app_mine(ran: Ran) -> None:
    _opened(ran, "two-prompts", greedy=True)


def _app_trace(ran: Ran) -> None:
    _opened(ran, "default", replay=True)


def _version(ran: Ran) -> None:
    assert (ran.code, ran.out) == (0, f"deepinfer-tui {__version__}\n")


def _demo(ran: Ran) -> None:
    assert ran.code == 0 and "tokens equal: yes" in ran.out and "→ passed" in ran.out
    assert "Stage 4" in ran.out and " cold: reused" in ran.out and " warm: reused" in ran.out


def _demo_trace(ran: Ran) -> None:
    assert ran.code == 0 and "    t1 request-1 restore cold" in ran.out


def _demo_json(ran: Ran) -> None:
    data = ran.json()
    assert ran.code == 0 and data["check"]["passed"] and len(data["stages"]) == 4


def _generate_batch(ran: Ran) -> None:
    data = ran.json()
    assert ran.code == 0 and data["config"]["max_batch_tokens"] == 4
    assert [r["tokens"] for r in data["results"]] == [_oracle([1, 2, 3], 6), _oracle([4, 5, 6], 6)]


def _generate_greedy(ran: Ran) -> None:
    assert ran.code == 0 and "greedy, no draft model" in ran.out
    assert "t1 request-1 restore cold" in ran.out
    assert "[" + " ".join(map(str, _oracle([1, 2, 3, 4], 8))) + "]" in ran.out


def _generate_file(ran: Ran) -> None:
    assert ran.code == 0 and "→ passed" in ran.out
    assert "mine       length     [" + " ".join(map(str, _oracle([7, 8, 9], 4))) in ran.out


def _generate_mask(ran: Ran) -> None:
    assert ran.code == 1 and "→ FAILED" in ran.out and "bounded approximation" in ran.out


def _generate_bad(ran: Ran) -> None:
    assert (ran.code, ran.out) == (2, "")
    assert ran.err.count("\n") == 1 and "99 is outside the vocabulary [0, 32)" in ran.err


def _bounded(ran: Ran) -> None:
    assert ran.code == 0 and "Kept positions: 24–31" in ran.out and "approximations" in ran.out


def _bounded_json(ran: Ran) -> None:
    data = ran.json()
    depth = default_scenario().model["depth"]
    assert ran.code == 0 and data["kept_from"] == 48
    assert data["consumer_rows"] == {"exact": 64 * depth, "mask": 64 * depth, "compact": 16 * depth}


def _export(ran: Ran) -> None:
    names = {p.name for p in (ran.folder / "deepinfer-exports").iterdir()}
    suffixes = ("svg", "html", "txt", "trace.json", "perfetto.json")
    assert ran.code == 0 and names == {f"default-t0005.{s}" for s in suffixes}
    assert "at tick 5" in ran.out


def _export_mine(ran: Ran) -> None:
    data = ran.json()
    files = [Path(f) for f in data["files"]]
    assert ran.code == 0 and data["scenario"] == "two-prompts"
    assert sorted(f.suffix for f in files) == [".json", ".txt"]
    assert all(f.parent.name == "snapshots" and (ran.folder / f).is_file() for f in files)
    trace = json.loads((ran.folder / files[-1]).read_text(encoding="utf-8"))
    assert trace["scenario"]["draft"] is None  # --greedy


def _replay_check(ran: Ran) -> None:
    assert ran.code == 0 and "Re-execution reproduced every recorded event" in ran.out


def _replay_json(ran: Ran) -> None:
    data = ran.json()
    assert ran.code == 0 and data["reproduced"] and data["operations"] == 5


def _guide_list(ran: Ran) -> None:
    ids = [line.split()[0] for line in ran.out.splitlines() if re.match(r"\d\d ", line)]
    assert ran.code == 0 and ids == [c.id for c in guide.list_chapters("zh")]


def _guide_chapter(ran: Ran) -> None:
    assert ran.code == 0 and ran.out == guide.read_chapter("01", "en").text


def _guide_json(ran: Ran) -> None:
    data = ran.json()
    assert ran.code == 0 and (data["id"], data["lang"]) == ("01", "zh")
    assert data["text"].startswith("# ")


EXPECTED: dict[str, Callable[[Ran], None]] = {
    "deepinfer-tui": _app_default,
    "deepinfer-tui --scenario my.json --greedy": _app_mine,
    f"deepinfer-tui --trace {TRACE}": _app_trace,
    "python -m deepinfer_tui --version": _version,
    "deepinfer-tui demo": _demo,
    "deepinfer-tui demo --trace": _demo_trace,
    "deepinfer-tui demo --json": _demo_json,
    "deepinfer-tui generate --prompt 1,2,3 --prompt 4,5,6 --max-tokens 6 --batch-budget 4 --json": (
        _generate_batch
    ),
    'deepinfer-tui generate --prompt "1 2 3 4" --greedy --trace': _generate_greedy,
    "deepinfer-tui generate --input requests.json --check": _generate_file,
    "deepinfer-tui generate --prompt 3,4,5,6,7,8,9,10,11,12,13,14,15,16 --recovery-mode mask "
    "--max-tokens 1 --check": _generate_mask,
    "deepinfer-tui generate --prompt 1,99": _generate_bad,
    "deepinfer-tui bounded --length 32 --keep 8": _bounded,
    "deepinfer-tui bounded --length 64 --keep 16 --json": _bounded_json,
    "deepinfer-tui export --steps 5": _export,
    "deepinfer-tui export --scenario my.json --out snapshots --format txt,json --greedy --json": (
        _export_mine
    ),
    f"deepinfer-tui replay {TRACE} --check": _replay_check,
    f"deepinfer-tui replay {TRACE} --json": _replay_json,
    f"deepinfer-tui replay {TRACE}": _app_trace,
    "deepinfer-tui guide --list --lang zh": _guide_list,
    "deepinfer-tui guide 01": _guide_chapter,
    "deepinfer-tui guide 01 --lang zh --json": _guide_json,
}


def test_every_expectation_is_of_a_line_on_the_page() -> None:
    assert sorted(EXPECTED) == sorted(_shown_command_lines(TEXT))


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """As in a terminal: the debugger opens (headless), notes what it opened on, and quits."""
    from textual.app import App

    import deepinfer_tui.cli.debugger as debugger
    import deepinfer_tui.cli.replay as replay
    from deepinfer_tui.app import DebuggerApp

    opened: list[dict[str, Any]] = []

    async def look_and_quit(pilot: Any) -> None:
        app = pilot.app
        await pilot.pause()
        greedy = app.session.engine.draft is None
        opened.append(
            {"scenario": app.session.scenario.name, "greedy": greedy, "replay": bool(app.replay)}
        )
        app.exit()

    def run_headless(app: DebuggerApp) -> None:
        App.run(app, headless=True, size=(120, 40), auto_pilot=look_and_quit)

    for module in (debugger, replay):
        monkeypatch.setattr(module, "interactive", lambda: True)
    monkeypatch.setattr(DebuggerApp, "run", run_headless)
    yield opened


@pytest.mark.parametrize("line", _shown_command_lines(TEXT))
def test_a_command_line_on_the_page_runs_as_described(
    line: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    terminal: list[dict[str, Any]],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, content in _shown_files(TEXT).items():
        Path(name).write_text(content, encoding="utf-8")
    if TRACE in line:  # made by the page's export line
        assert main(["export", "--steps", "5", "--format", "json"]) == 0
        capsys.readouterr()
    argv = shlex.split(line)
    if argv[0] == "python":
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
            timeout=120,
        )
        ran = Ran(done.returncode, done.stdout, done.stderr, tmp_path)
    else:
        assert argv[0] == "deepinfer-tui"
        code = main(argv[1:])
        out, err = capsys.readouterr()
        ran = Ran(code, out, err, tmp_path, terminal)
    EXPECTED[line](ran)
