"""The Perfetto export: a session as Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing).

Rounds become slices per request with phase sub-slices, events become instants, and the pool
and the acceptance rate become counter tracks. Time is synthetic: rounds have no measured
duration, so each is drawn as ROUND_US microseconds. The same session gives the same trace.
"""

from __future__ import annotations

from typing import Any

from .session import Session

ROUND_US = 1000  # synthetic time: one engine round is drawn as 1000 µs

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
ENGINE_TID = 0
PID = 1  # one process: the session

# Per round: each request's phase events by kind; the round's budget sits under request "".
Rounds = dict[int, dict[str, dict[str, dict[str, Any]]]]


def perfetto_trace(session: Session) -> dict[str, Any]:
    """Rounds as slices per request with phase sub-slices, counters, and named threads."""
    log = session.log()
    threads = _thread_ids(log)
    events = _naming_events(session.scenario.name, threads)
    rounds = _rounds(log)
    for tick in sorted(rounds):
        events.extend(_round_slices(tick, rounds[tick], threads))
    events.extend(_instant(event, threads) for event in log if event["kind"] not in PHASES)
    events.extend(_counter_events(session.round_metrics()))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": session.scenario.name,
            "tick": session.engine.tick,
            "time": f"synthetic: one engine round is drawn as {ROUND_US} µs",
        },
    }


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
        _metadata("process_name", ENGINE_TID, {"name": f"deepinfer-tui · {scenario}"}),
        _metadata("thread_name", ENGINE_TID, {"name": "engine"}),
        _metadata("thread_sort_index", ENGINE_TID, {"sort_index": 0}),
    ]
    for request_id, tid in threads.items():
        events.append(_metadata("thread_name", tid, {"name": request_id}))
        events.append(_metadata("thread_sort_index", tid, {"sort_index": tid}))
    return events


def _rounds(log: list[dict[str, Any]]) -> Rounds:
    """Per round: which phases each request went through, and the round's budget."""
    rounds: Rounds = {}
    for event in log:
        kind, tick = event["kind"], event["tick"]
        if kind in PHASE_KINDS and event.get("request_id"):
            rounds.setdefault(tick, {}).setdefault(event["request_id"], {})[kind] = event
        elif kind == "budget":
            rounds.setdefault(tick, {}).setdefault("", {})["budget"] = event
    return rounds


def _round_slices(
    tick: int, per_request: dict[str, dict[str, dict[str, Any]]], threads: dict[str, int]
) -> list[dict[str, Any]]:
    """The engine's slice for round `tick` (with its budget), then each request's."""
    start = _round_start(tick)
    engine_args = {"requests": len([r for r in per_request if r])}
    events = [_slice(f"round t{tick}", start, ROUND_US, ENGINE_TID, "round", engine_args)]
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
    start = _round_start(tick)
    commit = phases.get("commit")
    fields = ("tokens", "accepted", "verified", "outcome")
    args = {name: commit[name] for name in fields} if commit else {}
    events = [_slice(f"round t{tick}", start, ROUND_US, tid, "round", args)]
    for kind in PHASE_KINDS:
        if kind in phases:
            events.append(_phase_slice(kind, start, tid, _phase_args(phases[kind])))
    return events


def _instant(event: dict[str, Any], threads: dict[str, int]) -> dict[str, Any]:
    """An event that is not a phase, as an instant on its request's thread (or the engine's)."""
    kind, tick = event["kind"], event["tick"]
    offset = INSTANT_OFFSETS.get(kind, 0)
    ts = _round_start(tick) + offset if _in_round(event) else tick * ROUND_US
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


def _counter_events(metrics_by_tick: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The pool's blocks and the acceptance rate (this round's and overall) at every round."""
    events = []
    previous: dict[str, Any] | None = None
    for tick, metrics in sorted(metrics_by_tick.items()):
        ts = tick * ROUND_US
        blocks = metrics["blocks"]
        # Disjoint series, so the stacked counter track adds up to the whole pool.
        series = {
            "requests": blocks["held"],
            "cached": blocks["cached"],
            "retained": blocks["retained"],
            "free": blocks["free"],
        }
        events.append(_counter("blocks", ts, series))
        events.append(_counter("acceptance %", ts, _acceptance(metrics, previous)))
        previous = metrics
    return events


def _acceptance(metrics: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, float]:
    """Accepted of verified drafts, in percent: in the round since `previous`, and overall."""
    drafts = metrics["drafts"]
    overall = drafts["accepted"] / drafts["verified"] if drafts["verified"] else 0.0
    verified = drafts["verified"] - (previous["drafts"]["verified"] if previous else 0)
    accepted = drafts["accepted"] - (previous["drafts"]["accepted"] if previous else 0)
    return {
        "this round": round(100 * accepted / verified, 3) if verified > 0 else 0.0,
        "overall": round(100 * overall, 3),
    }


def _round_start(tick: int) -> int:
    return (tick - 1) * ROUND_US


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
    return _slice(kind, start + low, high - low, tid, "phase", args)


def _slice(
    name: str, ts: int, dur: int, tid: int, category: str, args: dict[str, Any]
) -> dict[str, Any]:
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": PID,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _counter(name: str, ts: int, values: dict[str, float]) -> dict[str, Any]:
    return {"ph": "C", "name": name, "pid": PID, "tid": ENGINE_TID, "ts": ts, "args": values}


def _metadata(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """A process or thread naming/ordering record (Chrome trace-event phase "M")."""
    return {"ph": "M", "name": name, "pid": PID, "tid": tid, "ts": 0, "args": args}


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
