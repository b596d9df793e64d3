"""The metrics view: serving figures per request and engine-wide, from one snapshot.

Per request (each request view's `timing`): TTFT, inter-token latency (mean and p95), queue
time, preemptions and recomputed positions; engine-wide (`metrics.serving`): acceptance by
draft depth, mean acceptance length, the prefix hit rate and KV usage; and a sparkline of the
selected request's inter-token latencies. Times are the injected clock's, in milliseconds, and
the view says so when the clock is synthetic (a cost model's time, not a measurement).
No Textual here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text

Timing = Mapping[str, Any]
SPARKS = "▁▂▃▄▅▆▇█"


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def p95(values: Sequence[float]) -> float | None:
    """The nearest-rank 95th percentile (the smallest value at or above 95% of them)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


# Columns of the request table: header, width, the cell from a request's timing.
COLUMNS: tuple[tuple[str, int, Callable[[Timing], str]], ...] = (
    ("ttft", 7, lambda t: _ms(t.get("ttft"))),
    ("itl", 6, lambda t: _ms(mean(t.get("itl") or []))),
    ("p95", 6, lambda t: _ms(p95(t.get("itl") or []))),
    ("queue", 6, lambda t: _ms(t.get("queue_time"))),
    ("pre", 4, lambda t: str(t.get("preemptions", 0))),
    ("recomp", 7, lambda t: str(t.get("recomputed_positions", 0))),
)


def metrics_lines(
    snapshot: Mapping[str, Any], width: int, selected: str | None = None
) -> list[Text]:
    """The view's lines for a pane `width` cells wide."""
    serving = snapshot.get("metrics", {}).get("serving", {})
    requests = snapshot.get("requests", [])
    lines = [clock_line(snapshot)]
    lines += request_table(requests, width, selected)
    lines += _sparkline(requests, width, selected)
    lines += engine_lines(serving)
    return lines


def clock_line(snapshot: Mapping[str, Any]) -> Text:
    """What the times mean: the injected clock's milliseconds, synthetic ones, or none yet."""
    serving = snapshot.get("metrics", {}).get("serving", {})
    return _clock_line(serving, _all_zero(snapshot.get("requests", [])))


def _clock_line(serving: Mapping[str, Any], never_moved: bool) -> Text:
    if serving.get("clock") == "synthetic":
        added = _ms(serving.get("synthetic_seconds", 0.0))
        return Text(f"ms · SYNTHETIC clock: modelled, not measured (+{added})", style="yellow")
    if never_moved:  # the injected clock moves only when told to (t, or the scenario)
        return Text(
            "ms · all 0: the clock stood still while they ran (synthetic_clock models a cost)",
            style="bright_black",
        )
    return Text("ms · the injected clock", style="bright_black")


def _all_zero(requests: Sequence[Mapping[str, Any]]) -> bool:
    """Some request has a first token, and no request's TTFT or latency is above zero."""
    timings = [r.get("timing") or {} for r in requests]
    measured = [t for t in timings if t.get("ttft") is not None]
    return bool(measured) and all(t["ttft"] == 0 and not any(t.get("itl") or []) for t in measured)


def request_table(
    requests: Sequence[Mapping[str, Any]], width: int, selected: str | None = None
) -> list[Text]:
    """A header and one line per request: the leftmost COLUMNS that fit in `width`."""
    name_width = min(max([2, *(len(r["id"]) for r in requests)]), 12)
    columns, used = [], name_width
    for column in COLUMNS:  # the leftmost columns that fit
        if used + 1 + column[1] > width:
            break
        columns.append(column)
        used += 1 + column[1]
    header = f"{'id':<{name_width}}" + "".join(f" {h:>{w}}" for h, w, _ in columns)
    lines = [Text(header, style="bold")]
    for request in requests:
        timing = request.get("timing") or {}
        cells = "".join(f" {cell(timing):>{w}}" for _, w, cell in columns)
        style = "reverse" if request["id"] == selected else ""
        lines.append(Text(f"{request['id'][:name_width]:<{name_width}}{cells}", style=style))
    return lines


def engine_lines(serving: Mapping[str, Any]) -> list[Text]:
    """The engine-wide counters of `metrics.serving`."""
    depths = serving.get("acceptance_by_depth") or []
    rates = " ".join(f"d{i + 1} {_percent(d.get('rate'))}" for i, d in enumerate(depths))
    length = serving.get("mean_acceptance_length")
    queried, hit = serving.get("prefix_query_tokens", 0), serving.get("prefix_hit_tokens", 0)
    mean_length = f"{length:.2f}" if length is not None else "- (no drafting rounds)"
    return [
        Text(f"acceptance by depth: {rates or 'no drafts verified yet'}"),
        Text(f"mean acceptance length: {mean_length}"),
        Text(
            f"prefix hits: {hit}/{queried} tokens ({_percent(serving.get('prefix_hit_rate'))})"
            f" · KV usage {_percent(serving.get('kv_usage'))}"
        ),
        Text(
            f"preemptions {serving.get('preemptions', 0)} · recomputed "
            f"{serving.get('recomputed_positions', 0)} positions"
        ),
    ]


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.0f}%"


def _sparkline(
    requests: Sequence[Mapping[str, Any]], width: int, selected: str | None
) -> list[Text]:
    """The selected request's inter-token latencies, newest last, as bars of the largest."""
    request = next((r for r in requests if r["id"] == selected), None)
    line = itl_sparkline(request, width) if request is not None else None
    if line is None:
        return [Text("ITL: select a request that has decoded", style="bright_black")]
    return [line]


def itl_sparkline(request: Mapping[str, Any], width: int) -> Text | None:
    """The request's inter-token latencies as bars in `width` cells (None: none yet)."""
    itl = list((request.get("timing") or {}).get("itl") or [])
    if not itl:
        return None
    top = max(itl)
    label = f"ITL {request['id']} (max {_ms(top)} ms) "
    shown = itl[-max(1, width - len(label)) :]
    # Eighths of the largest, rounded up: the largest is a full bar, half of it a half bar.
    bars = "".join(
        SPARKS[max(0, math.ceil(v / top * len(SPARKS)) - 1)] if top else SPARKS[0] for v in shown
    )
    return Text(label) + Text(bars, style="green")
