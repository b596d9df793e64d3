"""The README is what a newcomer reads and pastes: short, and true to the program. Every
command in it runs (in a fast form when it installs) and does what the README says."""

import json
import re
from pathlib import Path

from tests.docs.test_docs import (
    REPO,
    NotRun,
    Output,
    Ran,
    check_commands_are_covered,
    check_held_commands,
    quick_harness_ran,
    replay_reproduced,
    run_documented_commands,
)

README = REPO / "README.md"
REPLAY_ACTIONS = {"frame_forward", "frame_back", "first_frame", "last_frame"}  # a trace's viewer


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_library_example_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", readme(), re.S)
    assert blocks, "the README shows the library in use"
    exec(compile(blocks[0], "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "request-1" in printed and printed.splitlines()[-1] in ("queued", "running")


def test_readme_quick_start_is_the_two_commands() -> None:
    text = readme()
    assert "python -m pip install . && deepinfer-tui" in text
    assert "python -m pip install '.[test]' && python -m pytest" in text
    assert "about 4 minutes on 2 cores" in text  # how long the second one takes


def test_readme_is_short() -> None:
    lines = readme().splitlines()
    assert len(lines) <= 170, f"{len(lines)} lines: the detail belongs in docs/"


def keys_of(cell: str) -> set[str]:
    names = {"?": "question_mark", "+": "plus", "=": "equals_sign", "-": "minus"}
    return {names.get(key, key) for key in re.findall(r"`([^`]+)`", cell)}


def test_readme_keys_table_is_the_apps_bindings() -> None:
    from textual.binding import Binding

    from deepinfer_tui.app import DebuggerApp

    table = re.search(r"## Keys\n\n(.*?)\n\n", readme(), re.S)
    assert table
    rows = [line.split("|")[1] for line in table.group(1).splitlines()[2:]]
    documented = set().union(*map(keys_of, rows))
    bindings = [b for b in DebuggerApp.BINDINGS if isinstance(b, Binding)]
    live = {k for b in bindings if b.action not in REPLAY_ACTIONS for k in b.key.split(",")}
    assert documented == live | {DebuggerApp.COMMAND_PALETTE_BINDING}
    replay = {k for b in bindings if b.action in REPLAY_ACTIONS for k in b.key.split(",")}
    prose = readme()[table.end() :].split("\n\n")[0]  # the paragraph after the table
    assert replay == keys_of(prose)


# -- its commands ----------------------------------------------------------------------------------


def demo_passes(o: Output) -> None:
    assert "restore" in o.out and "→ passed" in o.out


def generate_json_matches_the_oracle(o: Output) -> None:
    from engine import TinyModel, greedy_generate

    report = json.loads(o.out)
    assert report["command"] == "generate"
    model = TinyModel(seed=7)  # the built-in scenario's target
    tokens = {r["id"]: r["tokens"] for r in report["results"]}
    assert tokens == {
        "request-1": list(greedy_generate(model, [1, 2, 3], max_tokens=6).tokens),
        "request-2": list(greedy_generate(model, [4, 5, 6], max_tokens=6).tokens),
    }


def exported_at_tick_5(o: Output) -> None:
    files = sorted(p.name for p in (o.folder / "deepinfer-exports").iterdir())
    suffixes = (".html", ".perfetto.json", ".svg", ".trace.json", ".txt")
    assert files == sorted(f"default-t0005{suffix}" for suffix in suffixes)
    assert "deepinfer-exports/default-t0005.svg" in o.out


def debugger_opened_and_quit(o: Output) -> None:
    assert "request-1" in o.out and "rollback" in o.out  # the table, the footer's keys


def replay_viewer_opened_and_quit(o: Output) -> None:
    assert "request-1" in o.out and "next" in o.out  # a replay steps frames, not rounds
    assert "rollback" not in o.out


def chinese_chapters_listed(o: Output) -> None:
    lines = [line for line in o.out.splitlines() if re.match(r"0\d ", line)]
    assert len(lines) == len(list((REPO / "deepinfer_tui/guides/zh").glob("*.md")))
    assert all(re.search(r"[\u4e00-\u9fff]", line) for line in lines)


def lint_clean(o: Output) -> None:
    assert "All checks passed" in o.out and "already formatted" in o.out


def screenshots_written(o: Output) -> None:
    names = {p.name for p in (REPO / "screenshots").glob("*.svg")}
    written = {p.name: p.read_text(encoding="utf-8") for p in o.scratch.glob("*.svg")}
    assert set(written) == names
    assert all(
        svg.lstrip().startswith("<svg") and "deepinfer-tui" in svg for svg in written.values()
    )


COMMANDS: dict[str, Ran | NotRun] = {
    "python -m pip install . && deepinfer-tui": Ran(
        debugger_opened_and_quit, runs="deepinfer-tui", keys=b"q", shows="quit"
    ),
    "python -m pip install '.[test]' && python -m pytest": NotRun("the whole suite: minutes"),
    "deepinfer-tui demo": Ran(demo_passes),
    "deepinfer-tui generate --prompt 1,2,3 --prompt 4,5,6 --max-tokens 6 --json": Ran(
        generate_json_matches_the_oracle
    ),
    "deepinfer-tui export --steps 5": Ran(exported_at_tick_5),
    "deepinfer-tui replay deepinfer-exports/default-t0005.trace.json --check": Ran(
        replay_reproduced
    ),
    "deepinfer-tui --trace deepinfer-exports/default-t0005.trace.json": Ran(
        replay_viewer_opened_and_quit, keys=b"q", shows="quit"
    ),
    "deepinfer-tui guide --list --lang zh": Ran(chinese_chapters_listed),
    "python -m pip install -e '.[test]' ruff": NotRun("installs"),
    "ruff check . && ruff format --check .": Ran(lint_clean, in_repo=True),
    "python benchmarks/run.py --quick": Ran(
        quick_harness_ran, fast=("--no-reference", "--json", "{scratch}/quick.json"), in_repo=True
    ),
    "python screenshots/capture.py": Ran(
        screenshots_written, fast=("--out", "{scratch}"), in_repo=True
    ),
}


def test_every_readme_command_has_a_check() -> None:
    check_commands_are_covered(("README.md",), COMMANDS)


def test_readme_commands_run(tmp_path: Path) -> None:
    run_documented_commands("README.md", COMMANDS, tmp_path)


def test_readme_held_commands_name_what_exists() -> None:
    check_held_commands(COMMANDS)
