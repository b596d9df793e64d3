"""The status header: where the engine is, what it holds, and how rounds have gone."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from ..legend import BLOCK_MARKS, FINISHED_HUE, STATUS_MARKS
from ..log_view import log_still_holds
from ..parsing import clip
from .render.text_strips import fitting_line
from .view import Event, View

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16
SPARK_MIN_WIDTH = 8  # rounds a narrow header still shows


def sparkline(values: Sequence[int], width: int = SPARK_WIDTH) -> str:
    """One glyph per round (the last `width` rounds); `·` marks a round that committed nothing."""
    shown = list(values)[-width:]
    top = max(shown, default=0)
    if top <= 0:
        return "·" * len(shown)
    glyphs = []
    for value in shown:
        if value <= 0:
            glyphs.append("·")
        else:
            level = round((value / top) * (len(SPARK_LEVELS) - 1))
            glyphs.append(SPARK_LEVELS[max(0, min(level, len(SPARK_LEVELS) - 1))])
    return "".join(glyphs)


class CommitTally:
    """Tokens committed per round, kept as the log grows: each refresh reads only new events.

    A log whose tail was rewritten (undo, a replay frame back) is tallied again.
    """

    def __init__(self) -> None:
        self._read = 0  # events of the log read so far
        self._last: Event | None = None  # the last of them
        self._per_round: dict[int, int] = {}

    def last_rounds(self, view: View, rounds: int) -> tuple[int, ...]:
        """Tokens committed in each of the last `rounds` rounds up to the view's tick, oldest
        first (0 for a round that committed nothing)."""
        self._follow(view.log)
        first = max(1, view.tick - rounds + 1)
        return tuple(self._per_round.get(tick, 0) for tick in range(first, view.tick + 1))

    def _follow(self, log: Sequence[Event]) -> None:
        read = self._read
        if not log_still_holds(log, read, self._last):
            read = 0
            self._per_round.clear()
        for event in log[read:]:
            if event.get("kind") == "commit" and "tick" in event:
                tick = int(event["tick"])
                self._per_round[tick] = self._per_round.get(tick, 0) + len(event.get("tokens", ()))
        self._read = len(log)
        self._last = log[-1] if log else None


class StatusBar(Widget):
    """Two lines of figures; rendered from the view alone, redrawn only when they change.
    Narrow terminals get shorter wording, so the header keeps its two rows.

    Each line is fitted to the width, so it is drawn from Rich's segments (`fitting_line`):
    no Textual Content is made or rendered for it, which cost a millisecond a round."""

    DEFAULT_CSS = """
    StatusBar {
        height: auto;
    }
    """

    direct_lines = True  # False: the lines go through Textual's Content (slower, the same)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown = Text()
        self._view: View | None = None
        self._tally = CommitTally()
        self._lines: list[Text] = []  # the shown text's lines, as fitted
        self._strips: dict[int, tuple[Hashable, Strip]] = {}  # drawn lines, with their look

    @property
    def content(self) -> Text:
        """The header's text, as shown."""
        return self._shown

    def show(self, view: View) -> None:
        self._view = view
        committed = self._tally.last_rounds(view, SPARK_WIDTH)
        # Before its first layout the header spans the screen, as it will.
        width = self.content_size.width or self.app.size.width or None
        text = render_status(view, committed, width)
        if text != self._shown:
            rows = len(self._lines)
            self._shown = text
            self._lines = text.split("\n", allow_blank=True)
            # Every line fits the width: the height changes only with the number of lines.
            self.refresh(layout=len(self._lines) != rows)

    def render(self) -> Text:
        return self._shown

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.direct_lines and all(line.cell_len <= width for line in self._lines):
            return max(1, len(self._lines))
        return super().get_content_height(container, viewport, width)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        line = self._lines[y] if self.direct_lines and y < len(self._lines) else None
        if line is None or line.cell_len > width:
            return super().render_line(y)
        base = self.visual_style.rich_style
        look = (line.plain, line.spans, width, base)
        kept = self._strips.get(y)
        if kept is None or kept[0] != look:
            # As long as the line, as Textual's rendering is: the pane pads it.
            strips = fitting_line(self.app.console, line, line.cell_len, base)
            if strips is None:
                return super().render_line(y)
            kept = self._strips[y] = (look, strips[0])
        return kept[1]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_resize(self) -> None:
        if self._view is not None:
            self.show(self._view)


# A header piece: its text, its shorter form for narrow terminals, and its style.
_Piece = tuple[str, str, str]


def render_status(view: View, committed: Sequence[int], width: int | None = None) -> Text:
    """The header's two lines, each fitted to `width` cells (None: as wide as it needs);
    `committed`: tokens per round for the sparkline."""
    text = Text()  # each line fits; a replay's divergence wraps below them
    # A replay's header takes the form its widest frame needs, in every frame: else it
    # switches between its long and short forms as the label and the counts change.
    widest = 0 if view.replay is None else view.replay.header_width
    text.append_text(_fit(_first_line(view), width, widest=widest))
    text.append("\n")
    # The short forms leave the sparkline at least SPARK_MIN_WIDTH rounds where they can.
    line = _fit(_second_line(view), None if width is None else width - SPARK_MIN_WIDTH, width)
    if width is not None and width - line.cell_len < SPARK_MIN_WIDTH:  # the budget goes first
        line = _fit(_second_line(view, budget=False), width - SPARK_MIN_WIDTH, width)
    gap = "" if line.plain.endswith(" ") else " "  # pieces left out: off the last number
    room = SPARK_WIDTH if width is None else min(SPARK_WIDTH, width - line.cell_len - len(gap))
    if room > 0:
        line.append(gap)
        line.append(sparkline(committed, room) or "·", style="bold green")
    text.append_text(line)
    if view.replay is not None and view.replay.divergence:
        # One row, cut to the width: the panes keep the screen (replay --check prints it whole).
        warning = f" ⚠ diverged: {view.replay.divergence}"
        text.append("\n")
        text.append_text(_fit([(warning, warning, "bold red")], width))
    return text


def widest_first_line(views: Iterable[View]) -> int:
    """The cells of the widest full first header line among `views` (a replay's frames)."""
    return max((_joined(_first_line(view), short=False).cell_len for view in views), default=0)


EXPORTING: _Piece = (" ⇣ writing the export ·", " ⇣ export ·", "bold yellow")


def _mode_pieces(view: View) -> list[_Piece]:
    """Replay or live, and what a live session is doing (computing, auto-running, exporting)."""
    exporting = [EXPORTING] if view.exporting else []
    if view.replay is not None:
        replay = view.replay
        frame = f"frame {replay.index + 1}/{replay.count}"
        return [
            (" ⏮ replay ", " ⏮ replay ", "bold reverse magenta"),
            *exporting,
            (f" read-only · {frame}", f" {frame}", "bold magenta"),
            (f" {replay.label} ·", f" {clip(replay.label, 32)} ·", "magenta"),
        ]
    pieces: list[_Piece] = [(" ● live ", " ● live ", "bold reverse green"), *exporting]
    if view.computing is not None:
        computing = view.computing
        long = f" ◷ computing round {computing.round} · {computing.positions:,} positions ·"
        pieces.append((long, f" ◷ round {computing.round} ·", "bold yellow"))
    if view.auto_waiting is not None:
        waits = f" ⏸ auto · waits for {view.auto_waiting} ·"
        pieces.append((waits, " ⏸ auto ·", "bold yellow"))
    elif view.auto_running:
        every = "" if view.auto_interval is None else f" {view.auto_interval:g}s"
        pieces.append((f" ▶ auto{every} ·", " ▶ auto ·", "bold green"))
    return pieces


def _first_line(view: View) -> list[_Piece]:
    snapshot = view.snapshot
    counts = snapshot.get("metrics", {}).get("requests", {})
    session = snapshot.get("session", {})
    first = _mode_pieces(view)
    scenario = session.get("scenario")
    if scenario:
        first.append((f" {scenario} ·", f" {clip(scenario, 24)} ·", "bold"))
    tick = f" tick {snapshot.get('tick', 0)}"
    first.append((tick, tick, "bold"))
    clock = f"{float(snapshot.get('clock', 0.0)):g}s"
    first.append((f" · clock {clock} · ", f" · {clock} · ", ""))
    for status in ("queued", "running"):
        mark = STATUS_MARKS[status]
        count = f"{mark.symbol}{counts.get(status, 0)}"
        first.append((f"{count} {status} ", f"{count} ", mark.style))
    finished = STATUS_MARKS["length"]  # the table's ✓ finished
    done = f"{finished.symbol}{counts.get('finished', 0)}"
    first.append((f"{done} finished", done, finished.style))
    if session.get("finished"):
        first.append((" · scenario complete", " · complete", f"bold {FINISHED_HUE}"))
    return first


def _second_line(view: View, *, budget: bool = True) -> list[_Piece]:
    snapshot = view.snapshot
    metrics = snapshot.get("metrics", {})
    blocks = metrics.get("blocks", {})
    second: list[_Piece] = [(" blocks ", " ", "")]
    # A partition of the pool, so the counts add up to the total ("used" counts the first three).
    parts = {
        "held": (BLOCK_MARKS["committed"], blocks.get("held", 0)),
        "cached": (BLOCK_MARKS["cached"], blocks.get("cached", 0)),
        "retained": (BLOCK_MARKS["retained"], blocks.get("retained", 0)),
        "free": (BLOCK_MARKS["free"], blocks.get("free", 0)),
    }
    for name, (mark, count) in parts.items():
        if name == "retained" and not count:
            continue
        second.append((f"{mark.symbol}{count} {name}", f"{mark.symbol}{count} {name}", mark.style))
        second.append((" ", " ", ""))
    second.append((f"of {blocks.get('total', 0)}", f"of {blocks.get('total', 0)}", ""))
    round_rows = _budget_used(view) if budget else None
    if round_rows:
        second.append((f" · budget {round_rows}", f" · bud {round_rows}", ""))
    acceptance = snapshot.get("acceptance")
    accept = "—" if acceptance is None else f"{acceptance:.0%}"
    second.append((f" · accept {accept}", f" · acc {accept}", ""))
    tokens = metrics.get("requests", {}).get("committed_tokens", 0)
    second.append((f" · committed {tokens} ", f" · tok {tokens} ", ""))
    return second


def _budget_used(view: View) -> str | None:
    """The rows the last round computed of its token budget ("17/2,048", grouped as the round
    view writes it), from its `schedule`
    event among the log's newest events (a round's events are few), if this tick ran one."""
    log = view.log
    for index in range(len(log) - 1, max(-1, len(log) - 400), -1):
        event = log[index]
        if event.get("tick") != view.tick:
            return None
        if event.get("kind") == "schedule":
            budget = event.get("budget")
            return f"{event.get('rows', 0):,}/{f'{budget:,}' if budget is not None else '∞'}"
    return None


def _fit(
    pieces: list[_Piece], width: int | None, limit: int | None = None, widest: int = 0
) -> Text:
    """One header line: in full if it fits `width`, else in its short forms within `limit`
    (default: `width`), leaving out whole pieces from the end if need be: a number is shown
    whole or not at all; `widest`: cells the full form needs at least (a replay's widest
    frame), so every frame takes the same form. A line never wraps,
    so the header keeps its height."""
    full = _joined(pieces, short=False)
    if width is None or max(full.cell_len, widest) <= width:
        return full
    cut = width if limit is None else limit
    kept = list(pieces)
    short = _joined(kept, short=True)
    while len(kept) > 1 and short.cell_len > cut:
        kept.pop()
        short = _joined(kept, short=True)
    if short.cell_len > cut:  # only the first piece left, and too wide: a label, cut
        short.truncate(cut, overflow="ellipsis")
    return short


def _joined(pieces: list[_Piece], *, short: bool) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for full, brief, style in pieces:
        text.append(brief if short else full, style=style)
    return text


class DescriptionLine(Static):
    """The scenario's description, one line under the header (cut with an ellipsis when long);
    hidden when there is none."""

    def __init__(self, description: str, **kwargs: Any) -> None:
        line = " ".join(description.split())  # one line, whatever the file's line breaks
        super().__init__(Text(f" {line}"), **kwargs)  # cut to the width by the stylesheet
        if not line:  # only then: an inline display would override the stylesheet's
            self.display = False
