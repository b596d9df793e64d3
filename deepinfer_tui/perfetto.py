"""The Perfetto export: a session as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing).

Each request is a thread. On it, nested: the request's whole life (its timing as arguments),
its intervals (queued -> prefill -> decode, and preempted from a preemption to the round it
runs again), each round it took part in, and that round's phases. Events become instants, and
the metrics become counter tracks (`perfetto_counters`). Time is synthetic (`perfetto_records`):
round t spans (t - 1) * ROUND_US to t * ROUND_US, and what happens between rounds sits on the
boundary. Every interval starts and ends on a round boundary, so the slices of a thread nest
(the JSON format requires it), and an outer slice is written before the slices inside it. The
same session gives the same trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .metrics_view import mean, p95
from .perfetto_counters import counter_events
from .perfetto_records import (
    ENGINE_TID,
    PID,
    ROUND_US,
    Record,
    complete,
    metadata,
    round_end,
    round_start,
)
from .session import Session

# Where each phase sits inside a round's 1000 µs (synthetic: rounds have no measured duration).
PHASES = {
    "restore": (0, 200),
    "draft": (200, 450),
    "budget": (450, 550),
    "verify": (550, 800),
    "commit": (800, 1000),
}
PHASE_KINDS = ("restore", "draft", "verify", "commit")
INSTANT_OFFSETS = {
    "evict": 10,
    "preempt": 500,
    "deferred": 500,
    "publish": 990,
    "finished": 995,
    "step_aborted": 999,
}
# A request's timing given as its life slice's arguments (seconds of the injected clock).
TIMING_ARGS = ("queue_time", "ttft", "prefill_time", "decode_time", "e2e")


@dataclass
class Preempted:
    """A request's time without its blocks: from the round it was preempted in."""

    since: int  # the round it was preempted in
    runs_again: int | None = None  # the next round that schedules it
    preemptions: int = 1


# Per round: each request's phase events by kind; the round's budget and schedule events sit
# under request "".
Rounds = dict[int, dict[str, dict[str, dict[str, Any]]]]


def perfetto_trace(session: Session) -> dict[str, Any]:
    """Per request: its life, intervals, rounds and phases; instants, counters, names."""
    log = session.log()
    tick = session.engine.tick
    threads = _thread_ids(log)
    events = _naming_events(session.scenario.name, threads)
    requests = session.snapshot()["requests"]
    events.extend(request_intervals(requests, log, threads, tick))  # outer slices first
    rounds = _rounds(log)
    for round_ in sorted(rounds):
        events.extend(_round_slices(round_, rounds[round_], threads))
    events.extend(_instant(event, threads) for event in log if event["kind"] not in PHASES)
    events.extend(counter_events(session.round_metrics(), log))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": session.scenario.name,
            "tick": tick,
            "time": (
                f"synthetic: engine round t is drawn from (t-1)*{ROUND_US} to t*{ROUND_US} µs; "
                "the requests' clock-second timing is in their slices' arguments"
            ),
        },
    }


# -- per-request intervals -----------------------------------------------------------------


def request_intervals(
    requests: Sequence[dict[str, Any]],
    log: Sequence[dict[str, Any]],
    threads: dict[str, int],
    tick: int,
) -> list[Record]:
    """Each request's life and intervals, from its timing's rounds (`Result.timing`) and its
    `preempt` events; a request still running ends at the current tick."""
    preempts = _preemptions(log)
    events: list[Record] = []
    for request in requests:
        tid = threads.get(request["id"])
        if tid is not None:
            events += _intervals(request, preempts.get(request["id"], []), tid, tick)
    return events


def _intervals(
    request: dict[str, Any], preempts: list[Preempted], tid: int, tick: int
) -> list[Record]:
    timing = request["timing"]
    scheduled, first = timing["scheduled_round"], timing["first_token_round"]
    begin = round_end(timing["queued_round"])  # submitted between rounds
    finished = timing["finished_round"]
    end = round_end(finished if finished is not None else tick)
    # Boundaries: queued until the round it is first scheduled in starts, prefill until the
    # round of its first token ends, then decode.
    prefill_from = round_start(scheduled) if scheduled is not None else end
    decode_from = round_end(first) if first is not None else end
    slices = [
        (request["id"], begin, end, "request", _life_args(request)),
        ("queued", begin, prefill_from, "interval", {}),
        ("prefill", prefill_from, decode_from, "interval", {}),
        ("decode", decode_from, end, "interval", {}),
    ]
    for span in preempts:
        again = span.runs_again
        until = round_start(again) if again is not None else end
        args = {
            "preempted in": f"t{span.since}",
            "runs again in": None if again is None else f"t{again}",
            "preemptions": span.preemptions,
        }
        slices.append(("preempted", round_start(span.since), until, "interval", args))
    return [
        complete(name, low, min(high, end) - low, tid, category, args)
        for name, low, high, category, args in slices
        if begin <= low < min(high, end)  # an interval of no rounds is not drawn
    ]


def _preemptions(log: Sequence[dict[str, Any]]) -> dict[str, list[Preempted]]:
    """Per request, each time it lost its blocks: the round, the next round scheduling it
    (None: none yet), and how many preemptions that was (it may lose blocks it got back at
    admission again before it runs)."""
    found: dict[str, list[Preempted]] = {}
    for event in log:
        kind = event["kind"]
        if kind == "preempt":
            spans = found.setdefault(event["request_id"], [])
            if spans and spans[-1].runs_again is None:
                spans[-1].preemptions += 1
            else:
                spans.append(Preempted(event["tick"]))
        elif kind == "schedule":
            for part in event["requests"]:
                spans = found.get(part["request_id"])
                if spans and spans[-1].runs_again is None and event["tick"] > spans[-1].since:
                    spans[-1].runs_again = event["tick"]
    return found


def _life_args(request: dict[str, Any]) -> dict[str, Any]:
    """What the request's life slice says: how it ended, and its timing in clock seconds."""
    timing = request["timing"]
    itl = timing["itl"] or []
    args: dict[str, Any] = {"status": request["status"], "finish_reason": request["finish_reason"]}
    args.update({name: timing[name] for name in TIMING_ARGS})
    args.update({"itl_mean": mean(itl), "itl_p95": p95(itl), "tokens": len(request["generated"])})
    args.update({name: timing[name] for name in ("preemptions", "recomputed_positions")})
    return args


def _thread_ids(log: list[dict[str, Any]]) -> dict[str, int]:
    """One thread per request, numbered from 1 in order of first appearance (0: the engine)."""
    threads: dict[str, int] = {}
    for event in log:
        request_id = event.get("request_id")
        if request_id and request_id not in threads:
            threads[request_id] = len(threads) + 1
    return threads


def _naming_events(scenario: str, threads: dict[str, int]) -> list[dict[str, Any]]:
    """The process's and every thread's name and sort order."""
    events = [
        metadata("process_name", ENGINE_TID, {"name": f"deepinfer-tui · {scenario}"}),
        metadata("thread_name", ENGINE_TID, {"name": "engine"}),
        metadata("thread_sort_index", ENGINE_TID, {"sort_index": 0}),
    ]
    for request_id, tid in threads.items():
        events.append(metadata("thread_name", tid, {"name": request_id}))
        events.append(metadata("thread_sort_index", tid, {"sort_index": tid}))
    return events


def _rounds(log: list[dict[str, Any]]) -> Rounds:
    """Per round: which phases each request went through, and the round's budget."""
    rounds: Rounds = {}
    for event in log:
        kind, tick = event["kind"], event["tick"]
        if kind in PHASE_KINDS and event.get("request_id"):
            rounds.setdefault(tick, {}).setdefault(event["request_id"], {})[kind] = event
        elif kind in ("budget", "schedule"):
            rounds.setdefault(tick, {}).setdefault("", {})[kind] = event
    return rounds


def _round_slices(
    tick: int, per_request: dict[str, dict[str, dict[str, Any]]], threads: dict[str, int]
) -> list[dict[str, Any]]:
    """The engine's slice for round `tick` (with its budget), then each request's."""
    start = round_start(tick)
    engine_args: dict[str, Any] = {"requests": len([r for r in per_request if r])}
    schedule = per_request.get("", {}).get("schedule")
    if schedule is not None:  # the rows the round computed, of its token budget
        engine_args.update(rows=schedule["rows"], token_budget=schedule["budget"])
    events = [complete(f"round t{tick}", start, ROUND_US, ENGINE_TID, "round", engine_args)]
    if "budget" in per_request.get("", {}):
        budget = per_request[""]["budget"]
        args = {name: budget[name] for name in ("total", "per_request", "expected_tokens")}
        events.append(_phase_slice("budget", start, ENGINE_TID, args))
    for request_id, phases in per_request.items():
        if request_id:
            events.extend(_request_slices(tick, phases, threads[request_id]))
    return events


def _request_slices(tick: int, phases: dict[str, dict[str, Any]], tid: int) -> list[dict[str, Any]]:
    """One request's round slice (the commit's outcome as its arguments) and phase slices."""
    start = round_start(tick)
    commit = phases.get("commit")
    fields = ("tokens", "accepted", "verified", "outcome")
    args = {name: commit[name] for name in fields} if commit else {}
    events = [complete(f"round t{tick}", start, ROUND_US, tid, "round", args)]
    for kind in PHASE_KINDS:
        if kind in phases:
            events.append(_phase_slice(kind, start, tid, _phase_args(phases[kind])))
    return events


def _instant(event: dict[str, Any], threads: dict[str, int]) -> dict[str, Any]:
    """An event that is not a phase, as an instant on its request's thread (or the engine's)."""
    kind, tick = event["kind"], event["tick"]
    offset = INSTANT_OFFSETS.get(kind, 0)
    ts = round_start(tick) + offset if _in_round(event) else tick * ROUND_US
    return {
        "ph": "i",
        "s": "t",
        "name": event["text"] if kind == "note" else kind,
        "cat": kind,
        "pid": PID,
        "tid": threads.get(event.get("request_id") or "", ENGINE_TID),
        "ts": max(0, ts),
        "args": _fields(event),
    }


def _in_round(event: dict[str, Any]) -> bool:
    """Whether an event happened inside round `tick` (else between rounds, after it)."""
    kind = event["kind"]
    if kind == "finished":
        return event.get("finish_reason") != "cancelled"
    return kind in PHASES or kind in INSTANT_OFFSETS


def _fields(event: dict[str, Any]) -> dict[str, Any]:
    """An event's own fields, without where and when it happened."""
    return {k: v for k, v in event.items() if k not in ("tick", "kind", "request_id")}


def _phase_slice(kind: str, start: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    low, high = PHASES[kind]
    return complete(kind, start + low, high - low, tid, "phase", args)


def _phase_args(event: dict[str, Any]) -> dict[str, Any]:
    kind = event["kind"]
    if kind == "restore":
        return {
            "cache": event["cache"],
            "reused_positions": event["reused_positions"],
            "reason": event["reason"],
        }
    if kind in ("draft", "verify"):
        nodes = event.get("nodes", [])
        verdicts = [n.get("verdict") for n in nodes]
        return {
            "nodes": max(0, len(nodes) - 1),
            "accepted": verdicts.count("accepted"),
            "rejected": verdicts.count("rejected"),
        }
    return _fields(event)
