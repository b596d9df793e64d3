"""The README is what a newcomer reads and pastes: short, and true to the program. Its shell
commands are run by test_docs.py with the other documents' commands."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
REPLAY_ACTIONS = {"frame_forward", "frame_back"}  # the keys of a saved trace's viewer


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
    assert "about 3-4 minutes on 2 cores" in text  # how long the second one takes


def test_readme_is_short() -> None:
    lines = readme().splitlines()
    assert len(lines) <= 170, f"{len(lines)} lines: the detail belongs in docs/"


def keys_of(cell: str) -> set[str]:
    names = {"?": "question_mark"}
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
