"""The round pane: how the last round spent its token budget (see `round_view`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ..round_view import last_schedule, round_lines
from .view import View


class RoundPane(Static, can_focus=True):
    """Shown instead of the draft tree when the view area shows the round (key 4)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[int, int] | None = None
        self._view: View | None = None

    def on_resize(self) -> None:
        # Shown by key 4, the pane is first laid out after show(): draw it again at its width.
        if self._view is not None:
            self.show(self._view)

    def show(self, view: View, request_id: str | None = None) -> None:
        self._view = view
        event = last_schedule(view.log)
        width = max(20, self.size.width)  # the content area: inside the border
        key = (id(event), width)
        if key == self._shown:
            return
        self._shown = key
        tick = event.get("tick") if event is not None else None
        self.border_title = "Round" + (f" · t{tick}" if tick is not None else "")
        self.update(Text("\n").join(round_lines(event, width)))
