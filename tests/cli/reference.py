"""The generated parts of docs/cli.md: flag tables from the parser, the exit statuses and the
JSON shapes from their definitions. `python -m tests.cli.reference` rewrites them in place."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from deepinfer_tui.cli import build_parser
from deepinfer_tui.cli.exits import EXIT_STATUSES
from deepinfer_tui.cli.shapes import markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
GENERATED = re.compile(
    r"(<!-- generated: (?P<what>[\w -]+) -->\n)(?P<body>.*?)(<!-- end -->)", re.S
)
ENGINE_GROUP = "engine settings (override the scenario's)"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """The program's parser ("app") and each command's, by name."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"app": parser, **commands.choices}


def _groups(parser: argparse.ArgumentParser) -> list[argparse._ArgumentGroup]:
    return list(parser._action_groups)


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        value = " " + (action.metavar or "{" + ",".join(map(str, action.choices or ())) + "}")
    return ", ".join(f"`{option}{value}`" for option in action.option_strings)


def flags_table(name: str) -> str:
    """A command's flags as a Markdown table ("engine": the engine settings group)."""
    parsers = _parsers()
    parser = parsers["app" if name == "engine" else name]
    rows = ["| flag | meaning |", "| --- | --- |"]
    for group in _groups(parser):
        if (group.title == ENGINE_GROUP) != (name == "engine"):
            continue
        for action in group._group_actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            meaning = (action.help or "").replace("|", "\\|")
            rows.append(f"| {_flag(action)} | {meaning} |")
    return "\n".join(rows) + "\n"


def exit_table() -> str:
    rows = ["| status | meaning |", "| --- | --- |"]
    rows += [f"| {status} | {meaning} |" for status, meaning in EXIT_STATUSES]
    return "\n".join(rows) + "\n"


def render(what: str) -> str:
    kind, _, name = what.partition(" ")
    if kind == "json":
        return markdown(name)
    if kind == "flags":
        return flags_table(name)
    if kind == "exit-statuses":
        return exit_table()
    raise KeyError(f"docs/cli.md: unknown generated part {what!r}")


def regenerate(text: str) -> str:
    """`text` with every generated part written afresh."""
    return GENERATED.sub(lambda m: m[1] + render(m["what"]) + m[4], text)


def generated_parts(text: str) -> list[str]:
    return [match["what"] for match in GENERATED.finditer(text)]


if __name__ == "__main__":
    DOC.write_text(regenerate(DOC.read_text(encoding="utf-8")), encoding="utf-8")
