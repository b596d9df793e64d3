"""The round view: how the last round spent its token budget, request by request.

Built from the round's `schedule` event (no Textual here): one bar per request, split into
prefill rows, the pending position (decode) and verified draft nodes, a cell a row while the
largest request's rows fit the bar (else scaled to it, so bars of a few decode rows still
differ), and a last line with the rows used of the token budget. Every kind has a symbol as
well as a colour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from .describe import plural
from .legend import packed

KINDS = (  # kind, bar symbol, style, what it means
    ("prefill", "█", "cyan", "prompt rows computed (a chunk, or the whole remaining prompt)"),
    ("decode", "▓", "green", "the pending position: its row gives the next token"),
    ("draft", "░", "yellow", "draft nodes the target verified"),
)
Event = Mapping[str, Any]


def last_schedule(log: Sequence[Event]) -> Event | None:
    """The newest `schedule` event of the log (None before the first round that ran)."""
    for event in reversed(log):
        if event.get("kind") == "schedule":
            return event
    return None


def round_lines(event: Event | None, width: int) -> list[Text]:
    """The view's lines for a pane `width` cells wide."""
    if event is None:
        return [Text("no round has run yet: press space to step", style="bright_black")]
    parts = event.get("requests", [])
    budget = event.get("budget")
    rows = int(event.get("rows", 0))
    name_width = min(max((len(p["request_id"]) for p in parts), default=0), 16)
    bar_width = max(8, width - name_width - 30)
    largest = max((sum(int(p[kind]) for kind, *_ in KINDS) for p in parts), default=0)
    scale = max(largest, bar_width)
    lines = _legend(scale / bar_width, width)
    for part in parts:
        line = Text(f"{part['request_id'][:name_width]:<{name_width}} ")
        cells = 0
        for kind, symbol, style, _ in KINDS:
            count = int(part[kind])
            span = min(_cells(count, scale, bar_width), bar_width - cells)
            line.append(symbol * span, style=style)
            cells += span
        line.append("·" * max(0, bar_width - cells), style="bright_black")
        numbers = " + ".join(f"{part[kind]} {kind}" for kind, *_ in KINDS if part[kind])
        line.append(f" {numbers}")
        lines.append(line)
    of = f" of the token budget {budget:,}" if budget else " (no token budget)"
    share = f" ({100 * rows / budget:.0f}%)" if budget else ""
    lines.append(Text(f"round t{event.get('tick', 0)}: {plural(rows, 'row')}{of}{share}"))
    return lines


def _legend(rows_a_cell: float, width: int) -> list[Text]:
    """The bar's marks and its scale, in lines of `width`, none split between two."""
    entries = [Text.assemble((symbol, style), f" {kind}") for kind, symbol, style, _ in KINDS]
    each = "a row" if rows_a_cell == 1 else f"{rows_a_cell:.3g} rows"
    entries.append(Text(f"· a cell is {each}", style="bright_black"))
    return packed(entries, width)


def _cells(count: int, scale: int, width: int) -> int:
    """Cells of a bar for `count` rows of `scale`: at least one for any rows at all."""
    if count <= 0:
        return 0
    return max(1, round(count * width / scale))
