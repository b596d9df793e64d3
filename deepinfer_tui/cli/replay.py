"""`replay`: re-execute a saved JSON trace, in the debugger or as a check."""

from __future__ import annotations

import argparse
from typing import Any

from ..export import DEFAULT_EXPORT_DIR
from ..replay import Replay, load_trace
from .common import interactive, print_json
from .debugger import run_app
from .exits import FAILED, OK
from .options import add_command, add_json_option

SUMMARY = "re-execute a saved JSON trace and check it reproduces the recorded events"
DETAILS = """\
In a terminal (without --check/--json) it opens the debugger read-only on the trace,
to step through it forwards and backwards. Otherwise it reports whether re-execution
reproduced every recorded event, or the first divergence. Exit 1 on divergence."""


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "replay", SUMMARY, DETAILS, run)
    parser.add_argument("trace", metavar="TRACE.json", help="a .trace.json file from an export")
    parser.add_argument(
        "--check", action="store_true", help="only check the re-execution (no debugger)"
    )
    add_json_option(parser)


def run(args: argparse.Namespace) -> int:
    viewing = not args.check and not args.json and interactive()
    replay = Replay(load_trace(args.trace), frames=viewing)  # a check needs no frames
    if viewing:
        return run_app(replay.session, export_dir=DEFAULT_EXPORT_DIR, replay=replay)
    recorded = len(replay.trace.events)
    if args.json:
        print_json(
            {
                "command": "replay",
                "trace": args.trace,
                "scenario": replay.trace.scenario.name,
                "operations": len(replay.trace.operations),
                "events": recorded,
                "frames": replay.executed + 1,  # the start and one per operation re-executed
                "reproduced": replay.reproduced,
                "divergence": replay.divergence,
            }
        )
    else:
        print(
            f"{args.trace}: scenario {replay.trace.scenario.name!r}, "
            f"{len(replay.trace.operations)} operations, {recorded} recorded events"
        )
        if replay.reproduced:
            print(
                f"Re-execution reproduced every recorded event ({recorded} events, "
                f"tick {replay.session.engine.tick})."
            )
        else:
            print(f"Re-execution DIVERGED: {replay.divergence}")
    return OK if replay.reproduced else FAILED
