"""The metrics pane: TTFT, inter-token latency, queue time and engine counters (see
`metrics_view`). It scrolls: a short terminal leaves the engine counters below the table."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..metrics_view import metrics_lines
from .view import View


class MetricsPane(VerticalScroll, can_focus=True):
    """Shown in the view area on key 5."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[View, int, str | None] | None = None  # holds the view: no id reuse

    def compose(self) -> ComposeResult:
        yield Static("", id="metrics-lines")

    def show(self, view: View, selected: str | None) -> None:
        width = max(20, self.scrollable_content_region.width)
        key = (view, width, selected)
        if self._shown is not None and key[0] is self._shown[0] and key[1:] == self._shown[1:]:
            return
        self._shown = key
        self.border_title = f"Metrics · t{view.tick}"
        lines = metrics_lines(view.snapshot, width, selected)
        self.query_one("#metrics-lines", Static).update(Text("\n").join(lines))

    def on_resize(self) -> None:
        """Shown before its first layout, or resized: draw the same view at the new size."""
        if self._shown is not None:
            view, _, selected = self._shown
            self.show(view, selected)
