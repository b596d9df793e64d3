"""The commit log: one `describe()` line per event, newest last, appended incrementally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import RichLog

from ..describe import describe
from .view import Event, View

KIND_STYLES: dict[str, str] = {
    "commit": "green",
    "rollback": "bold yellow",
    "restore": "cyan",
    "publish": "magenta",
    "evict": "yellow",
    "preempt": "bold yellow",
    "finished": "blue",
    "step_aborted": "bold red",
    "note": "italic",
    "draft": "bright_black",
    "budget": "bright_black",
    "verify": "bright_black",
}


def log_line(event: Event) -> Text:
    line = describe(dict(event))
    style = KIND_STYLES.get(str(event.get("kind")), "")
    if event.get("kind") == "finished" and event.get("finish_reason") in ("cancelled", "error"):
        style = "red"
    return Text(line, style=style)


class CommitLog(RichLog):
    """Appends only events it has not shown; rebuilds when the log shrank or the filter moved."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, max_lines=5000, **kwargs)
        self._filter: str | None = None
        self._shown = 0  # events of the (unfiltered) log already considered
        self._last: Event | None = None  # the last considered event, to detect rewrites
        self.border_title = "Commit log"

    @property
    def filter_id(self) -> str | None:
        return self._filter

    def show(self, view: View, filter_id: str | None) -> None:
        log: Sequence[Event] = view.log
        rewritten = (
            filter_id != self._filter
            or len(log) < self._shown
            or (self._shown > 0 and log[self._shown - 1] != self._last)
        )
        if rewritten:
            self.clear()
            self._shown = 0
            self._filter = filter_id
        fresh = [
            log_line(event)
            for event in log[self._shown :]
            if filter_id is None or event.get("request_id") == filter_id
        ]
        if fresh:
            # One write per refresh: RichLog measures and renders each write separately.
            self.write(Text("\n").join(fresh))
        self._shown = len(log)
        self._last = log[-1] if log else None
        if filter_id is None:
            self.border_title = f"Commit log · {len(log)} events"
        else:
            self.border_title = f"Commit log · only {filter_id} (f: all)"
