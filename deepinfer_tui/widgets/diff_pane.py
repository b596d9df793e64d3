"""The diff pane: what changed since the frame before (see `diff_view`). It scrolls: a round
that touches many requests lists them all, and a long line wraps."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..diff_view import diff_lines
from .view import View


class DiffPane(VerticalScroll, can_focus=True):
    """Shown in the view area on key 6; live, against the session before its last operation,
    in a replay against the previous frame."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: View | None = None  # holds the view: no id reuse

    def compose(self) -> ComposeResult:
        yield Static("", id="diff-lines")

    def show(self, view: View, selected: str | None = None) -> None:
        if view is self._shown:
            return
        self._shown = view
        diff = view.diff
        self.border_title = "Diff" + ("" if diff is None else f" · t{diff.after_tick}")
        self.query_one("#diff-lines", Static).update(Text("\n").join(diff_lines(diff, view.since)))
