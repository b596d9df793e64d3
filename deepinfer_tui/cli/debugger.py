"""Opening the debugger: the options given before any command, and the app's launch."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ..describe import error_message
from ..export import DEFAULT_EXPORT_DIR
from ..replay import Replay, load_trace
from ..screen_limits import large_block_warning
from ..session import Session
from .common import interactive, open_session, scenario_from
from .exits import FAILED, PROG, UsageError
from .options import (
    DEFAULT_EXPORT_FOLDER,
    add_engine_options,
    add_scenario_option,
    engine_overrides,
)

APP_PREFIX = "app_"  # the app's options' dests: a command given after them must not drop them


def add_app_options(parser: argparse.ArgumentParser) -> None:
    add_scenario_option(
        parser,
        "scenario JSON file to debug (default: the built-in scenario)",
        dest=f"{APP_PREFIX}scenario",
    )
    parser.add_argument(
        "--export-dir",
        metavar="DIR",
        dest=f"{APP_PREFIX}export_dir",  # None when not given, to tell it was
        help=f"folder the e key exports into (default: {DEFAULT_EXPORT_FOLDER})",
    )
    parser.add_argument(
        "--trace",
        metavar="TRACE.json",
        dest=f"{APP_PREFIX}trace",
        help="open a saved JSON trace read-only, to step through it forwards and backwards",
    )
    add_engine_options(parser, prefix=APP_PREFIX)
    parser.set_defaults(handler=run, command=None)


def run(args: argparse.Namespace) -> int:
    export_dir = Path(args.app_export_dir or DEFAULT_EXPORT_DIR)
    if args.app_trace is not None:
        # `is`, not `in`: 0 == False, and --seed 0 or --undo-depth 0 is a setting too.
        chosen = [
            k
            for k, v in engine_overrides(args, APP_PREFIX).items()
            if v is not None and v is not False
        ]
        if args.app_scenario is not None or chosen:
            raise UsageError(
                f"{PROG}: --trace replays a saved trace exactly as recorded; it cannot be "
                "combined with --scenario or engine settings"
            )
        replay = Replay(load_trace(args.app_trace))
        return run_app(replay.session, export_dir=export_dir, replay=replay)
    scenario = scenario_from(args.app_scenario, args, APP_PREFIX)
    size = shutil.get_terminal_size()
    warning = large_block_warning(scenario.engine_config().block_size, *size)
    if warning and interactive():  # said before the slow start, as the app says it again
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    session = open_session(scenario)
    return run_app(session, export_dir=export_dir)


def run_app(session: Session, *, export_dir: Path, replay: Replay | None = None) -> int:
    if not interactive():
        raise UsageError(
            f"{PROG}: the debugger needs an interactive terminal; for headless use try "
            f"'{PROG} demo', '{PROG} export' or '{PROG} replay TRACE --check'"
        )
    try:
        from ..app import DebuggerApp
    except ImportError as error:
        print(f"{PROG}: the debugger app cannot start: {error_message(error)}", file=sys.stderr)
        return FAILED
    app = DebuggerApp(session, export_dir=export_dir, replay=replay)
    app.run()
    return int(app.return_code or 0)


def misplaced_app_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """Why the app's options given with a command are refused, or None if there are none:
    argparse accepts `deepinfer-tui --seed 3 generate`, and the command would silently
    ignore them."""
    options = [
        action.option_strings[0]
        for action in parser._actions
        if action.dest.startswith(APP_PREFIX) and getattr(args, action.dest) != action.default
    ]
    if args.command is None or not options:
        return None
    return _misplaced_message(parser, args.command, options)


def _misplaced_message(parser: argparse.ArgumentParser, command: str, options: list[str]) -> str:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    accepted = subparsers.choices[command]._option_string_actions
    names = ", ".join(options)
    not_taken = [option for option in options if option not in accepted]
    if "--trace" in options and command != "replay":  # a command's --trace prints events
        return (
            f"--trace before '{command}' would be ignored; to step through a saved trace: "
            f"{PROG} --trace FILE, or {PROG} replay FILE"
        )
    if not not_taken:
        return (
            f"{names} before '{command}' would be ignored: a command's options go after it "
            f"({PROG} {command} {options[0]} ...)"
        )
    if command == "export" and "--export-dir" in not_taken:  # export's folder is its --out
        hint = f"; it writes into the folder given by --out ({PROG} export --out DIR)"
    else:
        hint = f" (see {PROG} {command} --help)"
    return (
        f"{names} before '{command}' would be ignored (options there set up the app), and "
        f"'{command}' has no {', '.join(not_taken)}{hint}"
    )
