"""What the commands share: the scenario and session they run, the oracle check, and the
lines and JSON pieces their reports are made of."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from engine import SamplingParams, sample_generate

from ..describe import describe, error_message, format_tokens
from ..scenario import Scenario, default_scenario, load_scenario
from ..session import Session
from .exits import UsageError
from .options import engine_overrides

ORACLE_TOLERANCE = 1e-10
SCOPE = "real float64 NumPy arithmetic on random, untrained weights: token ids, not language"


def scenario_from(
    path: str | None, args: argparse.Namespace, prefix: str = "", *, events: bool = True
) -> Scenario:
    """The scenario with the command line's engine settings; `events=False` drops its events
    first (`generate` brings its own requests: the settings must not be checked against the
    file's)."""
    scenario = default_scenario() if path is None else load_scenario(path)
    if not events:
        scenario = dataclasses.replace(scenario, events=())
    return scenario.with_overrides(**engine_overrides(args, prefix))


def open_session(scenario: Scenario, where: str | None = None) -> Session:
    try:
        return Session(scenario)
    except (ValueError, KeyError) as error:
        raise UsageError(f"{where or scenario.source}: {error_message(error)}") from None


def interactive() -> bool:
    # Either stream is None when the program starts with it closed (`<&-`).
    streams = (sys.stdin, sys.stdout)
    return all(stream is not None and stream.isatty() for stream in streams)


# -- reporting -----------------------------------------------------------------------------------


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, allow_nan=False))


def event_json(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "text": describe(event)}


def error_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def result_json(session: Session, request_id: str) -> dict[str, Any]:
    result = session.engine.result(request_id)
    return {
        "id": result.request_id,
        "prompt": list(result.prompt),
        "tokens": list(result.tokens),
        "finish_reason": result.finish_reason,
        "error": result.error,
        "accepted": result.accepted_drafts,
        "proposed": result.proposed_drafts,
    }


def result_line(result: dict[str, Any], width: int) -> str:
    line = (
        f"{result['id']:<{width}}  {result['finish_reason']:<9}  "
        f"{format_tokens(result['tokens'])}  "
        f"drafts accepted {result['accepted']} of {result['proposed']} proposed"
    )
    return line + (f"  error: {result['error']}" if result["error"] else "")


def print_work(metrics: dict[str, Any]) -> None:
    work = metrics["work"]
    print(
        f"Work: {work['target_forwards']} target forwards, {work['encoder_rows']} encoder rows, "
        f"{work['consumer_rows']} consumer rows, {work['draft_forwards']} draft forwards, "
        f"{work['draft_rows']} draft rows (row counts, not a speed measurement)"
    )


# -- the oracle check ----------------------------------------------------------------------------


def oracle_check(session: Session) -> dict[str, Any]:
    """Every finished, non-cancelled request against its oracle's full recompute (no cache,
    no drafts): greedy decoding, or sampling with the request's seed."""
    rows = [
        _oracle_row(session, view)
        for view in session.snapshot()["requests"]
        if view["status"] == "finished" and view["finish_reason"] != "cancelled"
    ]
    errors = [r["state_error"] for r in rows if r["state_error"] is not None]
    tokens_equal = all(r["tokens_equal"] for r in rows)
    max_error = max(errors) if errors else (0.0 if not rows else None)
    passed = tokens_equal and max_error is not None and max_error <= ORACLE_TOLERANCE
    return {
        "passed": passed,
        "checked": len(rows),
        "tokens_equal": tokens_equal,
        "max_state_error": max_error,
        "tolerance": ORACLE_TOLERANCE,
        "requests": rows,
    }


def _oracle_row(session: Session, view: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": view["id"],
        "finish_reason": view["finish_reason"],
        "tokens_equal": False,
        "state_error": None,
    }
    if view["finish_reason"] == "error":
        return row  # an engine error is a failed check, whatever the tokens
    engine = session.engine
    result = engine.result(view["id"])
    # A sampled request's oracle samples with its seed (equal to greedy at temperature 0).
    sampling = SamplingParams.from_dict(view["sampling"]) if view.get("sampling") else None
    oracle = sample_generate(
        engine.target,
        result.prompt,
        max_tokens=len(result.tokens),
        eos_id=view["eos_id"],
        sampling=sampling or SamplingParams(),
    )
    row["tokens_equal"] = oracle.tokens == result.tokens
    if row["tokens_equal"]:
        row["state_error"] = engine.committed_state(view["id"]).max_error(oracle.state)
    return row


def print_check(check: dict[str, Any], recovery_mode: str) -> None:
    print(
        f"Oracle check: {check['checked']} finished request(s) against full recompute "
        "(greedy, or sampled with each request's seed; no cache, no drafts)"
    )
    print(
        f"  tokens equal: {'yes' if check['tokens_equal'] else 'no'}, max state error: "
        f"{error_text(check['max_state_error'])} (tolerance {ORACLE_TOLERANCE:.0e}) → "
        f"{'passed' if check['passed'] else 'FAILED'}"
    )
    for row in check["requests"]:
        if not row["tokens_equal"]:
            print(f"  {row['id']}: tokens differ from the oracle ({row['finish_reason']})")
    if recovery_mode != "exact":
        print(
            f"  note: {recovery_mode} recovery is a bounded approximation; it may differ from "
            "the oracle by design"
        )
