"""The parser's plumbing and the option groups several commands share, each defined once."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from ..export import DEFAULT_EXPORT_DIR
from ..parsing import parse_tokens, shown, whole_number
from . import shapes
from .exits import UsageError

Handler = Callable[[argparse.Namespace], int]
DEFAULT_EXPORT_FOLDER = f"./{DEFAULT_EXPORT_DIR}/"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written where they fit the terminal, a paragraph that does
    not refilled to it; option help wrapped at spaces only, so a path such as
    ./deepinfer-exports/ is never split at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(re.sub(r"\s+", " ", text).strip(), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = re.split(r"\n[ \t]*\n", text.strip("\n"))
        lines = "\n\n".join("\n".join(_fit(p.splitlines(), width)) for p in paragraphs)
        return "".join(indent + line for line in lines.splitlines(keepends=True)) + "\n"


def _fit(lines: list[str], width: int) -> list[str]:
    """One paragraph: as written if it fits in `width`, else refilled. Prose (and a line
    with a hanging indent under it) flows as one; under a heading ("exit status:"), each
    indented row flows on its own, its tail under its second column (if that leaves room)."""
    if all(len(line) <= width for line in lines):
        return lines
    if not lines[0].endswith(":"):
        hanging = min((_indent(line) for line in lines[1:]), default=0)
        return _wrap(" ".join(line.strip() for line in lines), width, hanging)
    fitted, rows = [lines[0]], _rows(lines[1:])
    for row in rows:
        own, text = _indent(row[0]), " ".join(line.strip() for line in row)
        second = re.match(r"\s+\S+(?: \S+)*?\s{2,}(?=\S)", row[0])
        if second and width - len(second[0]) >= 24:  # the tail under the second column
            fitted += _wrap(" " * own + text, width, len(second[0]))
        elif second:  # too narrow for two columns: the second on lines of its own
            first, tail = row[0][: len(second[0])].rstrip(), text[len(second[0]) - own :]
            fitted += _wrap(first, width, own + 4) + _wrap(" " * (own + 4) + tail, width, own + 4)
        else:
            fitted += _wrap(" " * own + text, width, own + 4)
    return fitted


def _rows(lines: list[str]) -> list[list[str]]:
    """Lines grouped into rows: a row's continuation lines are indented deeper than it."""
    rows: list[list[str]] = []
    for line in lines:
        if rows and _indent(line) > _indent(rows[-1][0]):
            rows[-1].append(line)
        else:
            rows.append([line])
    return rows


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _wrap(text: str, width: int, under: int = 0) -> list[str]:
    return textwrap.wrap(
        text, width, subsequent_indent=" " * under, break_on_hyphens=False, break_long_words=False
    ) or [text]


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and never exits by itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        option = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        if option:  # argparse takes a value starting with "-" (e.g. "-1,2") for an option
            message += f" (if its value starts with '-', write {option[1]}=VALUE)"
        raise UsageError(f"{self.prog}: {message} (see --help)")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops write errors: --help into a full disk would exit 0, printing nothing.
        if message:
            (file or sys.stderr).write(message)


def add_command(
    commands: Any, name: str, summary: str, details: str, run: Handler
) -> argparse.ArgumentParser:
    """A command's parser: its summary, details and JSON shape as its description."""
    description = f"{summary}\n\n{details}"
    if name in shapes.SHAPES:
        description += "\n\n" + shapes.help_text(name)
    sub = commands.add_parser(
        name, help=summary, description=description, formatter_class=HelpFormatter
    )
    sub.set_defaults(handler=run, command=name)
    return sub


# -- argument types ------------------------------------------------------------------------------


def _whole(text: str, minimum: int) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise argparse.ArgumentTypeError(f"expected a {kind} whole number, got {text!r}")
    return value


def positive(text: str) -> int:
    return _whole(text, 1)


def non_negative(text: str) -> int:
    return _whole(text, 0)


def positive_or_none(text: str) -> int | str:
    """A positive integer, or "none" (no limit)."""
    return "none" if text.strip().lower() == "none" else _whole(text, 1)


def token_list(text: str) -> list[int]:
    """ "1,2,3" (commas and/or spaces) -> [1, 2, 3]; the vocabulary is checked later."""
    try:
        return parse_tokens(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"bad token list {shown(text)}: {error}") from None


# -- shared options ------------------------------------------------------------------------------


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")


def add_trace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", action="store_true", help="also print every engine event")


def add_scenario_option(parser: argparse.ArgumentParser, text: str, dest: str = "scenario") -> None:
    parser.add_argument("--scenario", metavar="FILE", dest=dest, help=text)


_ENGINE_FLAGS = (
    ("seed", non_negative, "model seed (the draft's: the scenario's draft seed, else N + 1)"),
    ("batch-budget", positive, "positions verified per round, all requests together"),
    ("draft-width", positive, "deepest draft-tree level"),
    ("branching", positive, "children per expanded draft node (1 = a chain)"),
    ("block-size", positive, "positions per KV block"),
    ("num-blocks", positive, "blocks in the KV pool"),
    ("window", positive, "local attention window of the target model"),
    (
        "keep",
        positive,
        "bounded recovery: positions local attention sees after a restore (compact: also the "
        "only ones whose consumers run)",
    ),
    ("undo-depth", non_negative, "rounds that undo can rewind (0: no undo history)"),
    (
        "token-budget",
        positive_or_none,
        "target rows one round computes, all requests together (none: no limit)",
    ),
    ("long-prefill-threshold", positive, "at most this many prompt rows of one request a round"),
)
ENGINE_SETTINGS = [flag.replace("-", "_") for flag, *_ in _ENGINE_FLAGS] + [
    "schedule_policy",
    "cache_policy",
    "recovery_mode",
    "greedy",
    "draft",
    "ngram_min",
    "ngram_max",
    "no_fast_paths",
]


def add_engine_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The engine settings the app, generate and export take (dests led by `prefix`)."""
    group = parser.add_argument_group("engine settings (override the scenario's)")
    for flag, kind, text in _ENGINE_FLAGS:
        dest = prefix + flag.replace("-", "_")
        group.add_argument(f"--{flag}", type=kind, metavar="N", help=text, dest=dest)
    group.add_argument(
        "--schedule-policy",
        choices=("fcfs", "priority", "lpm"),
        dest=f"{prefix}schedule_policy",
        help="admission order: fcfs (arrival, default), priority, lpm (longest cached prefix)",
    )
    group.add_argument(
        "--cache-policy",
        choices=("ttl", "blocks", "radix"),
        dest=f"{prefix}cache_policy",
        help="prefix cache: ttl (hot/warm entries, default), blocks (vLLM), radix (SGLang)",
    )
    group.add_argument(
        "--recovery-mode",
        choices=("exact", "mask", "compact"),
        dest=f"{prefix}recovery_mode",
        help="exact (default) or a bounded approximation: mask or compact",
    )
    drafting = group.add_mutually_exclusive_group()
    drafting.add_argument(
        "--greedy", action="store_true", dest=f"{prefix}greedy", help="no draft model, no drafts"
    )
    drafting.add_argument(
        "--draft",
        choices=("model", "ngram"),
        dest=f"{prefix}draft",
        help="who drafts: model (the scenario's early-exit draft model) or ngram (prompt "
        "lookup: the tokens that followed an earlier occurrence of the context's last n)",
    )
    group.add_argument(
        "--ngram-min",
        type=positive,
        metavar="N",
        dest=f"{prefix}ngram_min",
        help="with --draft ngram: the shortest suffix looked up (default 2)",
    )
    group.add_argument(
        "--ngram-max",
        type=positive,
        metavar="N",
        dest=f"{prefix}ngram_max",
        help="with --draft ngram: the longest suffix looked up (default 3, or --ngram-min)",
    )
    group.add_argument(
        "--no-fast-paths",
        action="store_true",
        dest=f"{prefix}no_fast_paths",
        help="the model's plain forward only: the same tokens, without the speed tricks",
    )


def engine_overrides(args: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
    """The engine flags as Scenario.with_overrides() keywords (their dests, less the prefix)."""
    return {name: getattr(args, prefix + name) for name in ENGINE_SETTINGS}
