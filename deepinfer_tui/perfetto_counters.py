"""The Perfetto export's counter tracks: what a serving dashboard plots, round by round.

Two kinds of sample. The engine's state after round t (the pool's blocks, KV usage, running
and queued requests, the prefix hit rate, acceptance, preemptions) is sampled at the end of
round t, from the metrics the session kept after that round's last operation (no
re-execution). What round t did (rows computed by kind, tokens committed) is sampled at the
start of round t, so the track holds that value for the round's whole width. Rates are in
percent; "this round" is the change since the previous sample, "overall" the whole session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from .perfetto_records import Record, counter, round_end, round_start

Metrics = dict[str, Any]


def counter_events(
    metrics_by_tick: dict[int, Metrics], log: Sequence[dict[str, Any]]
) -> list[Record]:
    """Every counter track's samples, round by round."""
    work = round_work(log)
    events: list[Record] = []
    previous: Metrics | None = None
    for tick, metrics in sorted(metrics_by_tick.items()):
        done = work.get(tick, Counter())
        events += _state_counters(round_end(tick), metrics, previous, done)
        if tick >= 1:
            events += _work_counters(round_start(tick), done)
        previous = metrics
    return events


def _state_counters(
    ts: int, metrics: Metrics, previous: Metrics | None, done: Counter[str]
) -> list[Record]:
    blocks, requests = metrics["blocks"], metrics["requests"]
    serving = metrics["serving"]
    # Disjoint series, so the stacked blocks track adds up to the whole pool.
    pool = {"requests": blocks["held"], **{k: blocks[k] for k in ("cached", "retained", "free")}}
    events = [
        counter("blocks", ts, pool),
        counter("KV usage %", ts, {"used": round(100 * serving["kv_usage"], 3)}),
        counter("requests", ts, {"running": requests["running"], "queued": requests["queued"]}),
        counter("acceptance %", ts, _acceptance(metrics, previous)),
        counter("prefix hit rate %", ts, _prefix_hits(serving, previous)),
        counter("preemptions", ts, {"total": serving["preemptions"]}),
    ]
    length = serving["mean_acceptance_length"]
    if length is not None:  # no drafting round yet: no mean length to plot
        this_round = 1 + done["accepted"] / done["drafting"] if done["drafting"] else 0.0
        lengths = {"this round": round(this_round, 3), "overall": round(length, 3)}
        events.append(counter("mean acceptance length", ts, lengths))
    return events


def _work_counters(ts: int, work: Counter[str]) -> list[Record]:
    rows = {kind: work[kind] for kind in ("prefill", "decode", "draft")}
    return [
        counter("rows per round", ts, rows),
        counter("tokens per round", ts, {"committed": work["tokens"]}),
    ]


def round_work(log: Sequence[dict[str, Any]]) -> dict[int, Counter[str]]:
    """Per round: rows computed by kind (its `schedule` event), tokens committed, and the
    requests' drafting rounds and accepted drafts (their `commit` events)."""
    work: dict[int, Counter[str]] = {}
    for event in log:
        kind = event["kind"]
        if kind == "schedule":
            done = work.setdefault(event["tick"], Counter())
            for part in event["requests"]:
                done.update({k: part[k] for k in ("prefill", "decode", "draft")})
        elif kind == "commit":
            done = work.setdefault(event["tick"], Counter())
            done["tokens"] += len(event["tokens"])
            if event["verified"]:  # a drafting round of this request (metrics.py's term)
                done["drafting"] += 1
                done["accepted"] += event["accepted"]
    return work


def _rate(part: float, whole: float) -> float:
    return round(100 * part / whole, 3) if whole > 0 else 0.0


def _acceptance(metrics: Metrics, previous: Metrics | None) -> dict[str, float]:
    """Accepted of verified drafts: in the round since `previous`, and overall."""
    drafts = metrics["drafts"]
    before = previous["drafts"] if previous else {"verified": 0, "accepted": 0}
    return {
        "this round": _rate(
            drafts["accepted"] - before["accepted"], drafts["verified"] - before["verified"]
        ),
        "overall": _rate(drafts["accepted"], drafts["verified"]),
    }


def _prefix_hits(serving: Metrics, previous: Metrics | None) -> dict[str, float]:
    """Prompt tokens found in the prefix cache of those looked up (vLLM's token hit rate)."""
    before = previous["serving"] if previous else {"prefix_query_tokens": 0, "prefix_hit_tokens": 0}
    queried = serving["prefix_query_tokens"] - before["prefix_query_tokens"]
    hit = serving["prefix_hit_tokens"] - before["prefix_hit_tokens"]
    return {
        "this round": _rate(hit, queried),
        "overall": _rate(serving["prefix_hit_tokens"], serving["prefix_query_tokens"]),
    }
