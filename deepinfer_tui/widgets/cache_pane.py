"""The prefix-cache pane: what the cache policy in use holds (see `cache_view`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import Static

from ..cache_view import cache_lines, cache_policy
from .view import View


class CachePane(Static, can_focus=True):
    """Shown instead of the draft tree when the view area shows the prefix cache (key 2)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self._shown: tuple[int, str | None, int] | None = None
        self._last: tuple[View, str | None] | None = None

    def show(self, view: View, selected: str | None) -> None:
        self._last = (view, selected)
        width = max(20, self.size.width - 2)
        key = (id(view), selected, width)
        if key == self._shown:
            return
        self._shown = key
        self.border_title = f"Prefix cache · {cache_policy(view.snapshot)}"
        lines = cache_lines(view.snapshot, view.request(selected), view.log, width)
        self.update(Text("\n").join(lines))

    def on_resize(self, event: events.Resize) -> None:
        # Shown from hidden, the pane learns its width only now: its legend and strip fit it.
        if self._last is not None:
            self.show(*self._last)
