"""The timeline view: one row per request, one column per round, each cell its state then.

Built from the event log alone (no Textual here): a round's `schedule` event says who ran and
how (prefill rows or decode/draft rows), `deferred`, `preempt` and `finished` events the rest,
and `queued` when a request arrived. A round with nothing about a request carries its state
on: queued stays queued, a running request that was not scheduled is waiting, a preempted one
stays preempted until it runs again. A cancel between rounds T and T+1 (its event carries tick
T) marks round T+1, the first round the request is not in: round T keeps what the request did
in it. Until round T+1 runs, that cell is one column past the current round. Every state has a
symbol as well as a colour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

STATES = (  # state, cell symbol, style
    ("queued", "·", "blue"),
    ("prefilling", "▒", "cyan"),
    ("decoding", "█", "green"),
    ("waiting", "~", "yellow"),
    # The request table's symbols: ↺ as its ↺N count of preemptions, ✗ as its cancelled mark.
    ("preempted", "↺", "bold red"),
    ("finished", "✓", "bright_black"),
    ("cancelled", "✗", "magenta"),
)
SYMBOLS = {state: (symbol, style) for state, symbol, style in STATES}
# What a round with no event about a request shows, after a round in each state (None: gone).
CARRIED = {
    "queued": "queued",
    "prefilling": "waiting",
    "decoding": "waiting",
    "waiting": "waiting",
    "preempted": "preempted",
    "finished": None,
    "cancelled": None,
}
Event = Mapping[str, Any]
Grid = dict[str, dict[int, str]]  # request id -> round -> state


def timeline_states(log: Sequence[Event]) -> Grid:
    """Every request's state in every round it existed in, from round 1 on (a cancel after
    the newest round: in the round after it, see the module docstring)."""
    arrived: dict[str, int] = {}  # request id -> the first round it could run in
    said: dict[int, dict[str, str]] = {}  # round -> request id -> the state its events say
    last_tick = 0
    for event in log:
        tick, kind = int(event.get("tick", 0)), event.get("kind")
        request_id = event.get("request_id")
        last_tick = max(last_tick, tick)
        if kind == "queued" and request_id is not None:
            arrived.setdefault(request_id, tick + 1)
        elif kind == "schedule":
            for part in event.get("requests", []):
                state = "prefilling" if part.get("prefill") else "decoding"
                _say(said, tick, part["request_id"], state)
        elif kind in ("deferred", "preempt", "finished") and request_id is not None:
            state = _event_state(event)
            round_ = tick + 1 if state == "cancelled" else tick  # between rounds: the next
            _say(said, round_, request_id, state)
    grid: Grid = {}
    for request_id, first in arrived.items():
        row: dict[int, str] = {}
        state: str | None = "queued"
        for tick in range(max(1, first), last_tick + 2):
            told = said.get(tick, {}).get(request_id)
            if tick > last_tick and told is None:
                break  # the round after the newest: only a cancel is there yet
            state = told or (CARRIED[state] if state else None)
            if state is None:
                break
            row[tick] = state
        grid[request_id] = row
    return grid


def newest_round(grid: Grid, tick: int) -> int:
    """The last column to draw: the current round, or the next one when a cancel after the
    current round is drawn there."""
    return max([tick, *(next(reversed(row)) for row in grid.values() if row)])


def _event_state(event: Event) -> str:
    if event["kind"] == "finished":
        return "cancelled" if event.get("finish_reason") == "cancelled" else "finished"
    return "preempted" if event["kind"] == "preempt" else "waiting"


# The state a round's events say wins over a weaker one: finishing beats running beats waiting.
_RANK = {"waiting": 0, "prefilling": 1, "decoding": 2, "preempted": 3, "finished": 4}
_RANK["cancelled"] = 5


def _say(said: dict[int, dict[str, str]], tick: int, request_id: str, state: str) -> None:
    states = said.setdefault(tick, {})
    old = states.get(request_id)
    if old is None or _RANK[state] >= _RANK[old]:
        states[request_id] = state


def timeline_lines(
    log: Sequence[Event],
    tick: int,
    width: int,
    height: int,
    selected: str | None = None,
    order: Sequence[str] = (),
    back: int = 0,
) -> list[Text]:
    """The view's lines for a pane `width` x `height` cells: the legend, a round axis, the
    rows that fit (a window that holds the selected request) and a line saying what is shown.
    The columns end at the newest round, or `back` rounds before it (scrolled to older ones;
    never past round 1)."""
    if tick <= 0:
        return [Text("no round has run yet: press space to step", style="bright_black")]
    grid = timeline_states(log)
    ids = ordered_ids(grid, order)
    name_width = name_width_of(ids)
    first, last, newest = _span(grid, tick, width - name_width - 1, back)
    # The legend names the states on screen (all of them when they all fit): a short pane
    # keeps its rows for requests.
    shown_states = {s for row in grid.values() for r, s in row.items() if first <= r <= last}
    legend = _legend(width, set(SYMBOLS))
    if len(legend) + 2 + len(ids) > height:
        legend = _legend(width, shown_states)
    room = max(1, height - len(legend) - 2)
    rows = _window(ids, selected, room)
    if len(ids) > room:
        # The window holds the selected request if it has a state in these rounds, else the
        # first that has: rows of requests that ended long before them would be blank.
        active = [i for i in ids if any(first <= r <= last for r in grid[i])]
        if active and selected not in active:
            start = min(ids.index(active[0]), len(ids) - room)
            rows = ids[start : start + room]
    lines = [*legend, *timeline_rows(grid, rows, (first, last), tick, name_width, selected)]
    span = f"{ids.index(rows[0]) + 1}-{ids.index(rows[-1]) + 1} of {len(ids)}"
    shown = f"{len(ids)} requests" if len(rows) == len(ids) else f"requests {span}"
    scroll = " · ← →" if first > 1 or last < newest else ""  # the pane's keys, when focused
    footer = Text(f"rounds {first}-{last} · {shown}{scroll}" if rows else "", style="bright_black")
    if footer.cell_len > width and rows:  # short forms before a number is cut
        shown = "" if len(rows) == len(ids) else f" · {span.replace(' of ', '/')}"
        footer = Text(f"r{first}-{last}{shown}{scroll}", style="bright_black")
    footer.truncate(width, overflow="ellipsis")
    lines.append(footer)
    return lines


def _span(grid: Grid, tick: int, columns: int, back: int) -> tuple[int, int, int]:
    """The first and last round drawn in `columns` cells, and the newest round there is."""
    newest = newest_round(grid, tick)
    last = max(min(newest, max(1, columns)), newest - max(0, back))
    return max(1, last - max(1, columns) + 1), last, newest


def round_at(
    log: Sequence[Event], tick: int, width: int, x: int, order: Sequence[str] = (), back: int = 0
) -> int | None:
    """The round whose column is at cell `x` of a pane `width` wide (None: a name, or past
    the rounds drawn); the same layout as `timeline_lines`."""
    if tick <= 0:
        return None
    grid = timeline_states(log)
    name_width = name_width_of(ordered_ids(grid, order))
    first, last, _ = _span(grid, tick, width - name_width - 1, back)
    round_ = first + x - name_width - 1
    return round_ if first <= round_ <= min(last, tick) else None


def ordered_ids(grid: Grid, order: Sequence[str] = ()) -> list[str]:
    """The grid's requests, those in `order` first (the request table's order)."""
    return [i for i in order if i in grid] + [i for i in grid if i not in order]


def name_width_of(ids: Sequence[str]) -> int:
    return min(max((len(i) for i in ids), default=0), 12)


def timeline_rows(
    grid: Grid,
    ids: Sequence[str],
    rounds: tuple[int, int],
    now: int,
    name_width: int,
    selected: str | None = None,
) -> list[Text]:
    """The round axis, then one line per id: its cells for rounds `rounds` (first, last)."""
    first, last = rounds
    lines = [_axis(first, last, now, name_width)]
    for request_id in ids:
        name_style = "reverse bold" if request_id == selected else ""  # the table's cursor
        line = Text()  # not Text(style=...): that would reverse the whole row
        line.append(f"{request_id[:name_width]:<{name_width}}", style=name_style)
        line.append(" ")
        _append_cells(line, grid[request_id], first, last)
        lines.append(line)
    return lines


def _append_cells(line: Text, row: dict[int, str], first: int, last: int) -> None:
    """A run of rounds in one state is one span: a long session's rows stay cheap to draw."""
    run_state, run_length = None, 0
    for round_ in range(first, last + 1):
        state = row.get(round_)
        if state != run_state and run_length:
            _append_run(line, run_state, run_length)
            run_length = 0
        run_state = state
        run_length += 1
    if run_length:
        _append_run(line, run_state, run_length)


def _append_run(line: Text, state: str | None, length: int) -> None:
    symbol, style = SYMBOLS[state] if state else (" ", "")
    line.append(symbol * length, style=style)


def _window(ids: list[str], selected: str | None, height: int) -> list[str]:
    """At most `height` ids, the selected one among them (it follows the table's cursor)."""
    if len(ids) <= height:
        return ids
    at = ids.index(selected) if selected in ids else 0
    start = min(max(0, at - height // 2), len(ids) - height)
    return ids[start : start + height]


def _axis(first: int, last: int, now: int, name_width: int) -> Text:
    """A ruler over the cells: `|` every tenth round, `▼` over the current one."""
    text = Text(f"{'round'[:name_width]:<{name_width}} ", style="bright_black")
    for round_ in range(first, last + 1):
        if round_ == now:
            text.append("▼", style="bold")
        else:
            text.append("|" if round_ % 10 == 0 else "·", style="bright_black")
    return text


def legend_lines(width: int, states: set[str] | None = None) -> list[Text]:
    """The symbols and words of `states` (default: every state), in lines of `width`."""
    return _legend(width, set(SYMBOLS) if states is None else states)


def _legend(width: int, states: set[str]) -> list[Text]:
    """These states' symbols and words, on as few lines of `width` as hold them."""
    lines = [Text()]
    for state, symbol, style in STATES:
        if state not in states:
            continue
        if lines[-1].cell_len and lines[-1].cell_len + len(state) + 3 > width:
            lines.append(Text())
        lines[-1].append(symbol, style=style)
        lines[-1].append(f" {state}  ")
    for line in lines:
        line.rstrip()
    return lines
