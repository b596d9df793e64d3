"""The timeline pane: requests x rounds, each cell a state (see `timeline_view`)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Static

from ..timeline_view import round_at, timeline_lines
from .view import View

SCROLL_ROUNDS = 5  # rounds one arrow key scrolls by


class TimelinePane(Static, can_focus=True):
    """Shown in the view area on key 3; follows the selected request. Focused, the arrow keys
    scroll to older rounds and back, home to the first, end to the newest (it then follows
    the rounds as they run)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "scroll_rounds(1)", "older", show=False),
        Binding("right", "scroll_rounds(-1)", "newer", show=False),
        Binding("home", "scroll_rounds(100000)", "first", show=False),
        Binding("end", "scroll_rounds(-100000)", "newest", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        # The view shown, its size and selection (holding the view: no id reuse), and how
        # many rounds before the newest the columns end.
        self._shown: tuple[View, int, int, str | None, int] | None = None
        self._back = 0

    def show(self, view: View, selected: str | None) -> None:
        width, height = max(20, self.content_size.width), max(4, self.content_size.height)
        key = (view, width, height, selected, self._back)
        if self._shown is not None and key[0] is self._shown[0] and key[1:] == self._shown[1:]:
            return
        self._shown = key
        self.border_title = f"Timeline · t{view.tick}"
        lines = timeline_lines(
            view.log, view.tick, width, height, selected, view.request_ids, self._back
        )
        self.update(Text("\n").join(lines))

    def action_scroll_rounds(self, pages: int) -> None:
        if self._shown is None:
            return
        view, width, *_, selected, _ = self._shown
        # No further back than round 1 needs with the widest names (12 cells): the view clamps
        # too, this keeps a press of the other arrow acting at once.
        oldest = max(0, view.tick - max(1, width - 13))
        self._back = min(max(0, self._back + pages * SCROLL_ROUNDS), oldest)
        self.show(view, selected)

    def on_click(self, event: events.Click) -> None:
        """A click on a round's column moves the debugger to that round (as G does)."""
        if self._shown is None:
            return
        view, width, *_ = self._shown
        offset = event.get_content_offset(self)
        if offset is None:
            return
        target = round_at(view.log, view.tick, width, offset.x, view.request_ids, self._back)
        if target is not None and target != view.tick:
            self.post_message(self.RoundChosen(target))

    class RoundChosen(Message):
        """The user chose round `round` on the timeline."""

        def __init__(self, round_: int) -> None:
            super().__init__()
            self.round = round_

    def on_resize(self) -> None:
        """Shown before its first layout, or resized: draw the same view at the new size."""
        if self._shown is not None:
            view, *_, selected, _ = self._shown
            self.show(view, selected)
