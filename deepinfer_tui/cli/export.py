"""`export`: step a scenario, then write its trace-snapshot files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..diff_view import FrameBefore
from ..export import ALL_FORMATS, DEFAULT_EXPORT_DIR, export_all, parse_formats
from .common import open_session, print_json, scenario_from
from .exits import PROG, UsageError
from .options import (
    DEFAULT_EXPORT_FOLDER,
    add_command,
    add_engine_options,
    add_json_option,
    add_scenario_option,
    non_negative,
)

SUMMARY = "step a scenario and write trace-snapshot files"
DETAILS = """\
Writes, named by scenario and tick (e.g. default-t0005.*): the trace-snapshot document
as .svg, .html and .txt (every request, block map, draft tree, the prefix cache, the
timeline, the last round's budget, the serving metrics, with --steps N the last round's
diff, and the whole commit log), the
replayable JSON trace (.trace.json) and a Chrome trace-event file (.perfetto.json:
per-request intervals and counter tracks) for ui.perfetto.dev or chrome://tracing.
Files appear whole or not at all."""


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "export", SUMMARY, DETAILS, run)
    add_scenario_option(parser, "scenario file (default: built-in)")
    parser.add_argument(
        "--steps", type=non_negative, metavar="N", help="rounds to run first (default: to the end)"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=str(DEFAULT_EXPORT_DIR),
        help=f"output folder, created if missing (default: {DEFAULT_EXPORT_FOLDER})",
    )
    parser.add_argument(
        "--format",
        default=",".join(ALL_FORMATS),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(ALL_FORMATS)} (default: all)",
    )
    add_json_option(parser)
    add_engine_options(parser)


def run(args: argparse.Namespace) -> int:
    try:
        formats = parse_formats(args.format)
    except ValueError as error:
        raise UsageError(f"{PROG} export: --format: {error}") from None
    session = open_session(scenario_from(args.scenario, args))
    steps, before = 0, None
    while session.can_step() and (args.steps is None or steps < args.steps):
        if args.steps is not None and steps == args.steps - 1:  # the last: keep the frame
            before = FrameBefore(session.snapshot(), "step")  # before it for the round diff
        session.step()
        steps += 1
    paths = export_all(session, Path(args.out), formats, before)
    if args.json:
        print_json(
            {
                "command": "export",
                "scenario": session.scenario.name,
                "tick": session.engine.tick,
                "files": [str(p) for p in paths],
            }
        )
    else:
        print(f"Exported scenario {session.scenario.name!r} at tick {session.engine.tick}:")
        for path in paths:
            print(f"  {path}")
    return 0
