"""The timeline pane: requests x rounds, each cell a state (see `timeline_view`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ..timeline_view import timeline_lines
from .view import View


class TimelinePane(Static, can_focus=True):
    """Shown in the view area on key 3; follows the selected request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[View, int, int, str | None] | None = None  # holds the view: no id reuse

    def show(self, view: View, selected: str | None) -> None:
        width, height = max(20, self.content_size.width), max(4, self.content_size.height)
        key = (view, width, height, selected)
        if self._shown is not None and key[0] is self._shown[0] and key[1:] == self._shown[1:]:
            return
        self._shown = key
        self.border_title = f"Timeline · t{view.tick}"
        lines = timeline_lines(view.log, view.tick, width, height, selected, view.request_ids)
        self.update(Text("\n").join(lines))

    def on_resize(self) -> None:
        """Shown before its first layout, or resized: draw the same view at the new size."""
        if self._shown is not None:
            view, *_, selected = self._shown
            self.show(view, selected)
