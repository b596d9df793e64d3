"""The status header: where the engine is, what it holds, and how rounds have gone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from ..legend import BLOCK_MARKS, STATUS_MARKS
from ..session import log_still_holds
from .quiet import update_static
from .view import Event, View

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16


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


class StatusBar(Static):
    """Two lines of figures; rendered from the view alone, redrawn only when they change."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: Text | None = None
        self._tally = CommitTally()

    def show(self, view: View) -> None:
        text = render_status(view, self._tally.last_rounds(view, SPARK_WIDTH))
        if text != self._shown:
            self._shown = text
            update_static(self, text)


def render_status(view: View, committed: Sequence[int]) -> Text:
    """The header's two lines; `committed`: tokens per round for the sparkline."""
    snapshot = view.snapshot
    metrics = snapshot.get("metrics", {})
    counts = metrics.get("requests", {})
    blocks = metrics.get("blocks", {})
    session = snapshot.get("session", {})
    text = Text(no_wrap=False)

    if view.replay is not None:
        replay = view.replay
        text.append(" ⏮ replay ", style="bold reverse magenta")
        text.append(f" read-only · frame {replay.index + 1}/{replay.count}", style="bold magenta")
        text.append(f" {replay.label}", style="magenta")
    else:
        text.append(" ● live ", style="bold reverse green")
        if view.computing is not None:
            computing = view.computing
            text.append(
                f" ◷ computing round {computing.round} · {computing.positions:,} positions ·",
                style="bold yellow",
            )
        if view.auto_waiting is not None:
            text.append(f" ⏸ auto · waits for the {view.auto_waiting} ·", style="bold yellow")
        elif view.auto_running:
            text.append(" ▶ auto ·", style="bold green")
    scenario = session.get("scenario")
    if scenario:
        text.append(f" {scenario}", style="bold")
    text.append(f" · tick {snapshot.get('tick', 0)}", style="bold")
    text.append(f" · clock {float(snapshot.get('clock', 0.0)):g}s · ")
    for status in ("queued", "running"):
        mark = STATUS_MARKS[status]
        text.append(f"{mark.symbol}{counts.get(status, 0)} {status} ", style=mark.style)
    text.append(f"■{counts.get('finished', 0)} done", style="blue")
    if session.get("finished"):
        text.append(" · scenario complete", style="bold blue")
    text.append("\n")

    text.append(" blocks ")
    # A partition of the pool, so the counts add up to the total ("used" counts the first three).
    parts = {
        "held": (BLOCK_MARKS["committed"], blocks.get("held", 0)),
        "cached": (BLOCK_MARKS["cached"], blocks.get("cached", 0)),
        "undo": (BLOCK_MARKS["retained"], blocks.get("retained", 0)),
        "free": (BLOCK_MARKS["free"], blocks.get("free", 0)),
    }
    for name, (mark, count) in parts.items():
        if name == "undo" and not count:
            continue
        text.append(f"{mark.symbol}{count} {name}", style=mark.style)
        text.append(" ")
    text.append(f"of {blocks.get('total', 0)}")
    acceptance = snapshot.get("acceptance")
    text.append(" · accept " + ("—" if acceptance is None else f"{acceptance:.0%}"))
    text.append(f" · committed {counts.get('committed_tokens', 0)} ")
    text.append(sparkline(committed) or "·", style="bold green")
    if view.replay is not None and view.replay.divergence:
        text.append(f"\n ⚠ diverged: {view.replay.divergence}", style="bold red")
    return text


class DescriptionLine(Static):
    """The scenario's description, one line under the header (cut with an ellipsis when long);
    hidden when there is none."""

    def __init__(self, description: str, **kwargs: Any) -> None:
        line = " ".join(description.split())  # one line, whatever the file's line breaks
        super().__init__(Text(f" {line}"), **kwargs)  # cut to the width by the stylesheet
        if not line:  # only then: an inline display would override the stylesheet's
            self.display = False
