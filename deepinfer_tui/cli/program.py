"""The program: its parser, assembled from each command's own, and main()."""

from __future__ import annotations

import argparse
import textwrap

from .. import __version__
from ..export import DEFAULT_EXPORT_DIR
from . import bounded, debugger, demo, export, generate, guide, replay
from .exits import EXIT_STATUSES, PROG, UsageError, exit_status, fail, with_guarded_stdout
from .options import HelpFormatter, Parser

COMMANDS = (demo, generate, bounded, export, replay, guide)  # in the order --help lists them

DESCRIPTION = """\
A terminal visual debugger for a speculative, prefix-caching NumPy inference engine.

Without a command it opens the debugger on the built-in scenario (or --scenario FILE): press
space to step a round, c to cancel, b to roll back, u to undo, e to export, ? for help.
The commands below run headless, for scripts and CI."""

EXAMPLES = (
    ("", "open the debugger on the built-in scenario"),
    ("--scenario my.json --greedy", "another scenario, without drafts"),
    ("demo --trace", "the whole scenario, stage by stage, checked"),
    ("generate --prompt 1,2,3 --prompt 4,5,6 --max-tokens 6 --batch-budget 4 --json", ""),
    ("bounded --length 32 --keep 8", "bounded recovery experiment (approximations)"),
    ("export --steps 5", f"trace snapshot files at tick 5, in {DEFAULT_EXPORT_DIR}/"),
    (f"replay {DEFAULT_EXPORT_DIR}/default-t0005.trace.json --check", ""),
    ("guide --list --lang zh", ""),
)


def _epilog() -> str:
    lines = ["examples:"]
    for arguments, purpose in EXAMPLES:
        command = f"{PROG} {arguments}".rstrip()
        lines.append(f"  {command:<47} {purpose}".rstrip())
    lines += ["", "exit status:"]
    for status, meaning in EXIT_STATUSES:
        lines += textwrap.wrap(
            meaning, 92, initial_indent=f"  {status:<4} ", subsequent_indent=" " * 7
        )
    lines += [
        "",
        'Every --json output is one object whose "command" key names the command. In the',
        "shapes each command's --help shows, name[] is a list, name|null may be null, name? is",
        "present only with a flag (--trace), and ... stands for an engine event's own fields.",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG, description=DESCRIPTION, epilog=_epilog(), formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    debugger.add_app_options(parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the program as `deepinfer-tui ARGV...`; returns its exit status."""
    return with_guarded_stdout(lambda: _parse_and_run(argv))


def _parse_and_run(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except UsageError as error:
        return fail(str(error))
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
    where = PROG if args.command is None else f"{PROG} {args.command}"
    if unknown:  # argparse would blame the program, not the command that was given them
        return fail(f"{where}: unrecognized arguments: {' '.join(unknown)} (see --help)")
    misplaced = debugger.misplaced_app_options(parser, args)
    if misplaced:
        return fail(misplaced)
    return exit_status(lambda: args.handler(args), where)
