"""`demo`: the built-in scenario, stage by stage, checked against the greedy oracle."""

from __future__ import annotations

import argparse
from typing import Any

from ..describe import format_tokens, plural
from ..scenario import default_scenario
from ..session import Session
from .common import (
    SCOPE,
    event_json,
    open_session,
    oracle_check,
    print_check,
    print_json,
    print_work,
    result_json,
    result_line,
)
from .exits import FAILED, OK
from .options import add_command, add_json_option, add_trace_option

SUMMARY = "run the built-in scenario to the end and check it against the greedy oracle"
DETAILS = """\
Prints, stage by stage, the restores (hot/warm/cold and reused positions), results,
draft rejections and rollbacks, and scenario notes; then compares every finished,
non-cancelled request with greedy decoding by full recompute: tokens equal, and the
largest difference of the committed state (tolerance 1e-10). Exit 1 if that fails."""

_BETWEEN_ROUNDS = ("note", "queued", "rollback")
_RESTORE_FIELDS = (
    "request_id",
    "cache",
    "reused_positions",
    "suffix_positions",
    "encoder_rows",
    "reason",
)


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "demo", SUMMARY, DETAILS, run)
    add_trace_option(parser)
    add_json_option(parser)


def run(args: argparse.Namespace) -> int:
    session = open_session(default_scenario())
    stages = [
        stage_summary(session, index, log, clock, args.trace)
        for index, (log, clock) in enumerate(run_in_stages(session), start=1)
    ]
    check = oracle_check(session)
    metrics = session.engine.metrics()
    if args.json:
        print_json(
            {
                "command": "demo",
                "scenario": session.scenario.name,
                "scope": SCOPE,
                "stages": stages,
                "check": check,
                "metrics": metrics,
            }
        )
    else:
        print(f"deepinfer-tui demo · scenario {session.scenario.name!r} · {SCOPE}")
        print(session.scenario.description)
        for stage in stages:
            _print_stage(stage)
        print()
        print_check(check, session.engine.config.recovery_mode)
        print_work(metrics)
    return OK if check["passed"] else FAILED


def _between_rounds(event: dict[str, Any]) -> bool:
    if event["kind"] == "finished":
        return event.get("finish_reason") == "cancelled"
    return event["kind"] in _BETWEEN_ROUNDS


def run_in_stages(session: Session) -> list[tuple[list[dict[str, Any]], float]]:
    """Run to the end; a new stage starts whenever the scenario waited for the engine to idle.

    Returns each stage's slice of the log and the clock when it began.
    """
    events = session.scenario.events
    starts = [(0, session.clock.now)]
    while session.can_step():
        pending = len(session.pending_events)
        logged = len(session.log_view())  # incremental: no full merge of the log per round
        session.step()
        applied = events[len(events) - pending : len(events) - len(session.pending_events)]
        if any(event.idle for event in applied):
            new = session.log_view()[logged:]
            cut = next((i for i, e in enumerate(new) if _between_rounds(e)), len(new))
            starts.append((logged + cut, session.clock.now))
    log = session.log()
    bounds = [index for index, _ in starts] + [len(log)]
    return [(log[bounds[i] : bounds[i + 1]], clock) for i, (_, clock) in enumerate(starts)]


def stage_summary(
    session: Session, index: int, log: list[dict[str, Any]], clock: float, with_events: bool
) -> dict[str, Any]:
    rounds = sorted({e["tick"] for e in log if e["kind"] == "commit"})
    stage: dict[str, Any] = {
        "index": index,
        "ticks": [rounds[0], rounds[-1]] if rounds else None,
        "clock": clock,
        "notes": [e["text"] for e in log if e["kind"] == "note"],
        "restores": [
            {key: e[key] for key in _RESTORE_FIELDS} for e in log if e["kind"] == "restore"
        ],
        "results": [result_json(session, e["request_id"]) for e in log if e["kind"] == "finished"],
        "speculation": _speculation(log),
        "rollbacks": [
            {"request_id": e["request_id"], "tick": e["tick"], "removed": e["removed"]}
            for e in log
            if e["kind"] == "rollback"
        ],
        "preemptions": sum(e["kind"] == "preempt" for e in log),
        "expired": sum(e["kind"] == "evict" and e["reason"] == "expired" for e in log),
        "evictions": sum(e["kind"] == "evict" and e["reason"] != "expired" for e in log),
    }
    if with_events:
        stage["events"] = [event_json(e) for e in log]
    return stage


def _speculation(log: list[dict[str, Any]]) -> dict[str, int]:
    commits = [e for e in log if e["kind"] == "commit"]
    rejected = sum(
        node.get("verdict") == "rejected"
        for e in log
        if e["kind"] == "verify"
        for node in e.get("nodes", [])
    )
    return {
        "verified": sum(e["verified"] for e in commits),
        "accepted": sum(e["accepted"] for e in commits),
        "rejected": rejected,
        "rolled_back_positions": sum(e["rolled_back_positions"] for e in commits),
    }


def _print_stage(stage: dict[str, Any]) -> None:
    ticks = stage["ticks"]
    rounds = f"rounds t{ticks[0]}–t{ticks[1]}" if ticks else "no rounds"
    print(f"\nStage {stage['index']} · {rounds} · clock {stage['clock']:g}s")
    for note in stage["notes"]:
        print(f"  note     {note}")
    for restore in stage["restores"]:
        print(
            f"  restore  {restore['request_id']} {restore['cache']}: reused "
            f"{restore['reused_positions']} positions, computed {restore['encoder_rows']} "
            f"({restore['reason']})"
        )
    width = max((len(r["id"]) for r in stage["results"]), default=0)
    for result in stage["results"]:
        print("  result  " + result_line(result, width))
    spec = stage["speculation"]
    if spec["verified"]:
        print(
            f"  drafts   {plural(spec['verified'], 'draft position')} verified: "
            f"{spec['accepted']} accepted, {spec['rejected']} rejected; "
            f"{plural(spec['rolled_back_positions'], 'speculative position')} rolled back"
        )
    for rollback in stage["rollbacks"]:
        print(f"  rollback {rollback['request_id']} removed {format_tokens(rollback['removed'])}")
    if stage["preemptions"] or stage["evictions"] or stage["expired"]:
        print(
            f"  pool     {plural(stage['preemptions'], 'preemption')}, "
            f"{plural(stage['expired'], 'cache entry', 'cache entries')} expired, "
            f"{plural(stage['evictions'], 'cache entry', 'cache entries')} evicted for space"
        )
    for event in stage.get("events", []):
        print(f"    {event['text']}")
