"""The trace-snapshot document's sections for the views on keys 3, 4 and 5: the timeline, the
last round's token budget and the serving metrics.

Each is drawn by its view's own functions (`timeline_view`, `round_view`, `metrics_view`) at
the width the document gives it, so paper and screen say the same thing. Where the screen
scrolls, the document shows all of it: the timeline is wrapped into pages of as many rounds as
the width holds (each page lists the requests that existed in its rounds), and the metrics
give every request's inter-token latencies, not only the selected one's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.text import Text

from .describe import plural
from .diff_view import FrameBefore, diff_lines, round_diff
from .metrics_view import clock_line, engine_lines, itl_sparkline, request_table
from .round_view import last_schedule, round_lines
from .timeline_view import (
    Grid,
    legend_lines,
    name_width_of,
    newest_round,
    ordered_ids,
    timeline_rows,
    timeline_states,
)

Event = dict[str, Any]
NOTHING_YET = "no round has run yet"
NO_FRAME_BEFORE = (
    "no frame before this one was kept: the app's export (e) and `export --steps N` (N > 0) "
    "show what the last operation changed"
)


class Drawn:
    """Lines drawn for the width the console offers when the document is rendered."""

    def __init__(self, draw: Callable[[int], list[Text]]) -> None:
        self.draw = draw

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text("\n").join(self.draw(options.max_width))


def view_sections(
    snapshot: dict[str, Any], log: list[Event], before: FrameBefore | None = None
) -> list[Group]:
    """The timeline, the round, the metrics and the round diff, in the order of their keys
    (3, 4, 5, 6)."""
    return [
        timeline_section(snapshot, log),
        round_section(log),
        metrics_section(snapshot),
        diff_section(snapshot, before),
    ]


def diff_section(snapshot: dict[str, Any], before: FrameBefore | None) -> Group:
    """What the last operation changed, as the diff pane (key 6) shows it."""
    if before is None:
        lines = [Text(NO_FRAME_BEFORE, "bright_black")]
    else:
        lines = diff_lines(round_diff(before.snapshot, snapshot), before.since)
    return Group(_heading("Round diff"), *lines)


def _heading(text: str) -> Text:
    return Text(f"\n{text}", "bold")


# -- 3: the timeline -----------------------------------------------------------------------------


def timeline_section(snapshot: dict[str, Any], log: list[Event]) -> Group:
    order = [request["id"] for request in snapshot["requests"]]
    tick = snapshot["tick"]
    return Group(
        _heading("Timeline · every request's state in every round"),
        Drawn(lambda width: timeline_pages(log, tick, order, width)),
    )


def timeline_pages(log: Sequence[Event], tick: int, order: Sequence[str], width: int) -> list[Text]:
    """The legend, then rounds 1 to the newest in pages of `width`: an axis, the requests
    that existed in the page's rounds, and a line saying which rounds and requests it shows."""
    if tick <= 0:
        return [Text(NOTHING_YET, "italic")]
    grid = timeline_states(log)
    ids = ordered_ids(grid, order)
    name_width = name_width_of(ids)
    columns = max(10, width - name_width - 1)
    newest = newest_round(grid, tick)
    lines = legend_lines(width)
    for first in range(1, newest + 1, columns):
        last = min(newest, first + columns - 1)
        shown = [i for i in ids if _existed(grid, i, first, last)]
        lines.append(Text())
        lines += timeline_rows(grid, shown, (first, last), tick, name_width)
        others = f" of {len(ids)} (the others were not in these rounds)"
        said = f"rounds {first}-{last} · {plural(len(shown), 'request')}"
        lines.append(Text(said + (others if len(shown) < len(ids) else ""), "bright_black"))
    return lines


def _existed(grid: Grid, request_id: str, first: int, last: int) -> bool:
    """Whether the request has a cell in rounds first..last (a row's rounds are contiguous)."""
    row = grid[request_id]
    return bool(row) and next(iter(row)) <= last and next(reversed(row)) >= first


# -- 4: the round ------------------------------------------------------------------------------


def round_section(log: Sequence[Event]) -> Group:
    event = last_schedule(log)
    heading = _heading("Round · how the last round spent its token budget")
    if event is None:
        return Group(heading, Text(NOTHING_YET, "italic"))
    return Group(heading, Drawn(lambda width: round_lines(event, width)))


# -- 5: the metrics ----------------------------------------------------------------------------


def metrics_section(snapshot: dict[str, Any]) -> Group:
    return Group(
        _heading("Metrics · serving figures per request and engine-wide"),
        Drawn(lambda width: metrics_document_lines(snapshot, width)),
    )


def metrics_document_lines(snapshot: dict[str, Any], width: int) -> list[Text]:
    """The metrics view with no request selected, then the ITL sparkline of every request
    with a latency above 0 (all-zero bars would say nothing)."""
    requests = snapshot["requests"]
    lines = [clock_line(snapshot), *request_table(requests, width)]
    lines += engine_lines(snapshot["metrics"]["serving"])
    moved = [r for r in requests if any((r.get("timing") or {}).get("itl") or [])]
    lines.append(Text())
    lines += [itl_sparkline(request, width) for request in moved] or [  # type: ignore[list-item]
        Text("ITL sparklines: no inter-token latency above 0 ms yet", "italic")
    ]
    return lines
