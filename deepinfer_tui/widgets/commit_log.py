"""The commit log: one `describe()` line per event, newest last.

A Line-API widget: at 64 active requests a round adds ~200 events, so appending must not
render anything. Events are described once (a plain string and a style name) and wrapped into
screen rows with a width check (only over-long lines go through Rich's word wrap); `render_line`
turns just the visible rows into strips. Everything is kept in flat lists of strings and ints,
which the garbage collector does not have to scan.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..describe import describe, plural
from ..legend import CACHE_HUE, FINISHED_HUE
from ..log_filter import explaining_evictions
from ..log_view import log_still_holds
from .render.quiet import scrollbar_held, set_scroll_extent, set_scrollbar
from .render.repaint_style import StyleOncePerRepaint
from .view import Event, View

KIND_STYLES: dict[str, str] = {
    "commit": "green",
    "rollback": "bold yellow",
    "restore": "cyan",
    "publish": CACHE_HUE,
    "evict": "yellow",
    "preempt": "bold yellow",
    "finished": FINISHED_HUE,
    "step_aborted": "bold red",
    "note": "italic",
    "draft": "bright_black",
    "budget": "bright_black",
    "schedule": "bright_black",
    "prefill": "cyan",
    "verify": "bright_black",
}


def line_style(event: Event) -> str:
    """The style of an event's line: its kind's colour, red for a failed or cancelled finish."""
    if event.get("kind") == "finished" and event.get("finish_reason") in ("cancelled", "error"):
        return "red"
    return KIND_STYLES.get(str(event.get("kind")), "")


class CommitLog(StyleOncePerRepaint, ScrollView, can_focus=True):
    """Appends only events it has not shown; truncates on undo; rebuilds when the filter moves."""

    DEFAULT_CSS = """
    CommitLog {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        overflow-x: hidden;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._filter: str | None = None  # the request whose lines alone are shown
        self._kind: str | None = None  # the event kind whose lines alone are shown
        self._explaining: frozenset[int] = frozenset()  # evictions behind the filter's restore
        self._events: list[Event] = []  # the (unfiltered) log prefix already considered
        # Each considered event's line (text, style), once described: turning the filter on or
        # off lays the lines out again without describing ~100k events again (~350 ms).
        self._described: list[tuple[str, str] | None] = []
        # Shown lines (filtered), oldest first: text, style name, index in `_events`, first row.
        self._texts: list[str] = []
        self._line_styles: list[str] = []
        self._line_events: list[int] = []
        self._first_rows: list[int] = []
        # Screen rows: a whole line or one piece of a wrapped one, and the line it belongs to.
        self._row_texts: list[str] = []
        self._row_lines: list[int] = []
        self._wrap_width = 0  # the width rows were wrapped at (0: not laid out yet)
        self._styles: dict[tuple[Style, str], Style] = {}
        self._following = True  # at the newest row: stay there when new rows come or we resize
        self.border_title = "Commit log"

    # -- what tests and the app read ----------------------------------------------------------

    @property
    def filter_id(self) -> str | None:
        return self._filter

    @property
    def lines(self) -> list[str]:
        """Every shown line's text (not only the visible ones), oldest first."""
        return list(self._texts)

    # -- updating -----------------------------------------------------------------------------

    @property
    def kind(self) -> str | None:
        return self._kind

    def show(self, view: View, filter_id: str | None, kind: str | None = None) -> None:
        # The scroll range grows, then the view scrolls to the newest row: the bar is drawn
        # again only if the two together move its thumb.
        bar = self.vertical_scrollbar if self.show_vertical_scrollbar else None
        with scrollbar_held(bar):
            self._show(view, filter_id, kind)

    def _show(self, view: View, filter_id: str | None, kind: str | None) -> None:
        log: Sequence[Event] = view.log
        self._truncate(self._common_prefix(log))
        explaining = (
            frozenset()
            if filter_id is None
            else frozenset(explaining_evictions(log, view.snapshot, filter_id))
        )
        refiltered = (filter_id, kind, explaining) != (self._filter, self._kind, self._explaining)
        self._filter, self._kind, self._explaining = filter_id, kind, explaining
        if refiltered:  # the same events, other lines
            self._clear_lines()
            for index in range(len(self._events)):
                self._show_line(index)
        fresh = range(len(self._events), len(log))
        for index, event in enumerate(log[fresh.start :], fresh.start):
            self._events.append(event)
            self._described.append(None)
            self._show_line(index)
        self._update_virtual_size()
        if refiltered or (fresh and self._following):
            # Newest last, in view unless the user has scrolled up to read: then the rows
            # stay put until they scroll back to the bottom.
            self._scroll_to_newest()
        if fresh or refiltered:
            self.refresh()
        self.border_title = self._title(len(log))

    def _title(self, events: int) -> str | Content:
        if self._filter is None and self._kind is None:
            return f"Commit log · {plural(events, 'event')}"
        only = " · ".join(part for part in (self._filter, self._kind) if part is not None)
        # f shows every request again; k moves on to the next kind (after the last: all).
        hints = (("f: every request", self._filter), ("k: next kind", self._kind))
        keys = ", ".join(hint for hint, on in hints if on is not None)
        # Plain Content: a title string is markup, and escape() misses tags such as [B].
        # The count shown says "none" when no event matches, and the pane is blank.
        shown = f"{len(self._texts)} of {plural(events, 'event')}"
        return Content(f"Commit log · only {only} · {shown} ({keys})")

    def _show_line(self, index: int) -> None:
        event = self._events[index]
        if self._kind is not None and event.get("kind") != self._kind:
            return
        if (
            self._filter is not None
            and event.get("request_id") != self._filter
            and index not in self._explaining
        ):
            return
        line = self._described[index]
        if line is None:
            # describe() only reads the event: no copy (a round adds ~200 of them).
            line = self._described[index] = (describe(event), line_style(event))
        self._append_line(index, *line)

    def _common_prefix(self, log: Sequence[Event]) -> int:
        """How many of the considered events the new log still starts with (all it shares
        with them, or none: anything else rebuilds from scratch)."""
        shared = min(len(log), len(self._events))
        if shared and log_still_holds(log, shared, self._events[shared - 1]):
            return shared
        return 0

    def _clear_lines(self) -> None:
        """Forget every shown line and row (the events and their descriptions stay)."""
        for lines in (self._texts, self._line_styles, self._line_events, self._first_rows):
            lines.clear()
        self._row_texts.clear()
        self._row_lines.clear()
        self.refresh()

    def _truncate(self, events: int) -> None:
        """Forget every event from index `events` on, with its lines and rows."""
        if events >= len(self._events):
            return
        del self._events[events:], self._described[events:]
        keep = len(self._line_events)
        while keep and self._line_events[keep - 1] >= events:
            keep -= 1
        rows = self._first_rows[keep] if keep < len(self._texts) else len(self._row_texts)
        for lines in (self._texts, self._line_styles, self._line_events, self._first_rows):
            del lines[keep:]
        del self._row_texts[rows:], self._row_lines[rows:]
        self._update_virtual_size()
        self.refresh()

    def _append_line(self, event_index: int, text: str, style: str) -> None:
        self._texts.append(text)
        self._line_styles.append(style)
        self._line_events.append(event_index)
        self._first_rows.append(len(self._row_texts))
        if self._wrap_width:
            self._add_rows(len(self._texts) - 1, text)

    def _add_rows(self, line: int, text: str) -> None:
        width = self._wrap_width
        # An ASCII character takes at most one cell, so a short ASCII line fits unmeasured.
        if (len(text) <= width and text.isascii()) or cell_len(text) <= width:
            pieces = [text]  # almost every line: no Rich work at all
        else:
            wrapped = Text(text).wrap(self.app.console, self._wrap_width)
            pieces = [piece.plain for piece in wrapped]
        self._row_texts.extend(pieces)
        self._row_lines.extend([line] * len(pieces))

    def _rewrap(self) -> None:
        self._row_texts.clear()
        self._row_lines.clear()
        self._first_rows.clear()
        for line, text in enumerate(self._texts):
            self._first_rows.append(len(self._row_texts))
            self._add_rows(line, text)
        self._update_virtual_size()

    def _update_virtual_size(self) -> None:
        # The grid sets the log's box; overflow-x hidden and overflow-y scroll keep the
        # scrollbars as they are: a growing log changes only its scroll range.
        set_scroll_extent(self, Size(self._wrap_width, len(self._row_texts)))

    # -- layout and rendering -----------------------------------------------------------------

    def _scroll_to_newest(self) -> None:
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._following = True

    def action_scroll_end(self) -> None:
        # At once, not animated: a round arriving mid-way would find the log above its bottom
        # and leave it there, as if the user had scrolled up to read.
        self._scroll_to_newest()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        if self.show_vertical_scrollbar:
            # Moved quietly first, so the base class's assignment changes nothing: the bar
            # repaints only if its thumb is drawn elsewhere (not every round at the bottom).
            set_scrollbar(self.vertical_scrollbar, position=new_value)
        super().watch_scroll_y(old_value, new_value)
        self._following = round(new_value) >= self.max_scroll_y

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width > 0 and width != self._wrap_width:
            self._wrap_width = width
            self._rewrap()
        if self._following:
            # Other panes grew or shrank (e.g. a new table row): keep the newest row in view.
            self._scroll_to_newest()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        row = self.scroll_offset.y + y
        if row >= len(self._row_texts):
            return Strip.blank(width, base)
        text = self._row_texts[row]
        # The widget's own style (colours, focus tint) goes under the line's, as in RichLog.
        style = self._style(base, self._line_styles[self._row_lines[row]])
        return Strip([Segment(text, style)], cell_len(text)).crop_extend(0, width, base)

    def _style(self, base: Style, name: str) -> Style:
        style = self._styles.get((base, name))
        if style is None:
            style = self._styles[(base, name)] = base + Style.parse(name) if name else base
        return style
