"""The metrics pane: TTFT, inter-token latency, queue time and engine counters (see
`metrics_view`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ..metrics_view import metrics_lines
from .view import View


class MetricsPane(Static, can_focus=True):
    """Shown in the view area on key 5."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[View, int, str | None] | None = None  # holds the view: no id reuse

    def show(self, view: View, selected: str | None) -> None:
        width = max(20, self.content_size.width)
        key = (view, width, selected)
        if self._shown is not None and key[0] is self._shown[0] and key[1:] == self._shown[1:]:
            return
        self._shown = key
        self.border_title = f"Metrics · t{view.tick}"
        self.update(Text("\n").join(metrics_lines(view.snapshot, width, selected)))

    def on_resize(self) -> None:
        """Shown before its first layout, or resized: draw the same view at the new size."""
        if self._shown is not None:
            view, _, selected = self._shown
            self.show(view, selected)
