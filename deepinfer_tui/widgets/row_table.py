"""A table of one-line rows, drawn with the Line API: a fixed header, a row cursor, stripes.

Each row is its cells' texts padded to their columns' widths, one segment per cell, kept until
its cells, its stripe, the cursor or the columns change. Textual's DataTable renders every
changed cell through Rich, and at 64 running requests (every row changes every round) its
updates and repaints were about 13 ms of a 45 ms keypress; these rows cost a few microseconds
each. Only what the request table needs is here: single-line text cells, one cursor row,
sideways scrolling when the columns are wider than the pane.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from .render.quiet import extent_keeps_box, refresh_rows, set_scroll_extent
from .row_table_css import ROW_TABLE_CSS

Cell = tuple[str, str]  # (text, style)
PADDING = 1  # blank cells on each side of a cell's text


class RowTable(ScrollView, can_focus=True):
    """Rows keyed by a string, each a tuple of cells, in the order `set_rows` gives."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        # Home and End go to the first and last row, as in Textual's lists (OptionList,
        # ListView); with shift, to the first and last column.
        Binding("home", "home", "First row", show=False),
        Binding("end", "end", "Last row", show=False),
        Binding("ctrl+home", "first_row", "First row", show=False),
        Binding("ctrl+end", "last_row", "Last row", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("shift+home", "scroll_home", "Leftmost", show=False),
        Binding("shift+end", "scroll_end", "Rightmost", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "row-table--header",
        "row-table--cursor",
        "row-table--stripe",
    }
    DEFAULT_CSS = ROW_TABLE_CSS

    class Highlighted(Message):
        """The cursor moved to another row (or the row under it changed)."""

        def __init__(self, table: RowTable, key: str | None) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> RowTable:
            return self.table

    header_height = 1

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._column_keys: tuple[str, ...] = ()
        self._headers: tuple[str, ...] = ()
        self._widths: tuple[int, ...] = ()
        self._keys: list[str] = []  # row order
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[Cell, ...]] = {}
        self._cursor = 0
        self._highlighted: str | None = None  # the key last announced by Highlighted
        # Each row's line (the header's under None), with what it was drawn from.
        self._strips: dict[str | None, tuple[Hashable, Strip]] = {}
        self._styles: dict[Hashable, Style] = {}  # composed styles, until the theme changes
        self._frame: tuple[int, int, int] | None = None  # width, top, left: within a repaint
        self._rows_shown = 0  # body rows the pane showed at its last size

    # -- content --------------------------------------------------------------------------

    @property
    def columns(self) -> tuple[str, ...]:
        """The keys of the columns shown, in order."""
        return self._column_keys

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def row_keys(self) -> list[str]:
        """Every row's key, top to bottom."""
        return list(self._keys)

    def set_columns(self, columns: Sequence[tuple[str, str]]) -> None:
        """Show these (key, header) columns and no rows."""
        self._column_keys = tuple(key for key, _ in columns)
        self._headers = tuple(header for _, header in columns)
        self._widths = tuple(cell_len(header) for header in self._headers)
        self.clear()

    def clear(self) -> None:
        """Remove every row (the columns stay)."""
        self._keys, self._index, self._cells = [], {}, {}
        self._strips.clear()
        self._cursor = 0
        self._resized()
        self.refresh()

    def set_rows(self, rows: Sequence[tuple[str, tuple[Cell, ...]]]) -> None:
        """Show exactly these rows, in this order: only rows whose cells changed are drawn
        again, unless rows came, went or moved, or a column grew (then every row is)."""
        keys = [key for key, _ in rows]
        moved = keys != self._keys
        widths = list(self._widths)
        changed: list[int] = []
        for index, (key, cells) in enumerate(rows):
            if self._cells.get(key) == cells:
                continue
            self._cells[key] = cells
            changed.append(index)
            for column, (text, _) in enumerate(cells):
                widths[column] = max(widths[column], cell_len(text))
        grew = tuple(widths) != self._widths
        self._widths = tuple(widths)
        # Rows that moved (a sort, a filter, rows gone), not rows only added at the end.
        reordered = moved and keys[: len(self._keys)] != self._keys
        if moved:
            selected = self.selected_key
            self._keys = keys
            self._index = {key: index for index, key in enumerate(keys)}
            for gone in set(self._cells) - set(self._index):
                del self._cells[gone]
                self._strips.pop(gone, None)
            if selected in self._index:
                self._cursor = self._index[selected]
            self._cursor = max(0, min(self._cursor, len(keys) - 1))
        if grew:
            self._strips.clear()
        if moved or grew:
            self._resized()
            if reordered:  # the cursor's row moved with its request: keep it in view
                self._scroll_to_cursor()
            self.refresh()
        else:
            top = round(self.scroll_offset.y) - self.header_height
            visible = (index - top for index in changed)
            # Regions stop short of the scrollbar, which would be drawn again with them.
            room = self.scrollable_content_region
            lines = (y for y in visible if self.header_height <= y < room.height)
            refresh_rows(self, lines, room.width)
        self._announce()

    def get_cell(self, key: str, column: str) -> Text:
        text, style = self._cells[key][self._column_keys.index(column)]
        return Text(text, style=style)

    @property
    def headers(self) -> tuple[str, ...]:
        """The shown columns' headers, in order."""
        return self._headers

    def get_row(self, key: str) -> list[Text]:
        return [Text(text, style=style) for text, style in self._cells[key]]

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def _resized(self) -> None:
        width = sum(self._widths) + 2 * PADDING * len(self._widths)
        size, before = Size(width, len(self._keys) + self.header_height), self.virtual_size
        if size == before:
            return
        if extent_keeps_box(self, before, size):
            # The box and its scrollbars stay as they are: no screen layout (which would
            # paint the keypress a second frame), only the scroll range moves.
            set_scroll_extent(self, size)
        else:
            self.virtual_size = size

    # -- the cursor -----------------------------------------------------------------------

    @property
    def cursor_row(self) -> int:
        return self._cursor

    @property
    def selected_key(self) -> str | None:
        return self._keys[self._cursor] if self._keys else None

    def move_cursor(self, row: int, scroll: bool = True) -> None:
        row = max(0, min(row, len(self._keys) - 1))
        if row != self._cursor:
            before, self._cursor = self._cursor, row
            self._refresh_row(before)
            self._refresh_row(row)
        if scroll:
            self._scroll_to_cursor()
        self._announce()

    def _announce(self) -> None:
        key = self.selected_key
        if key != self._highlighted:
            self._highlighted = key
            self.post_message(self.Highlighted(self, key))

    def _scroll_to_cursor(self) -> None:
        self._cursor_in_view()
        # Rows that bring a scrollbar (or, in an auto-height pane, more height) lay the screen
        # out first: until then a scroll is refused, so look again after that refresh.
        self.call_after_refresh(self._cursor_in_view)

    def on_resize(self) -> None:
        # A cursor row that was on screen stays there when the pane gets shorter.
        rows, self._rows_shown = self._rows_shown, self._page()
        top = round(self.scroll_offset.y)
        if top <= self._cursor < top + rows:
            self._scroll_to_cursor()

    def _cursor_in_view(self) -> None:
        rows = self.scrollable_content_region.height - self.header_height
        top = round(self.scroll_offset.y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False)
        elif rows > 0 and self._cursor >= top + rows:
            self.scroll_to(y=self._cursor - rows + 1, animate=False)

    def _refresh_row(self, index: int) -> None:
        y = index - round(self.scroll_offset.y) + self.header_height
        room = self.scrollable_content_region
        if self.header_height <= y < room.height:
            self.refresh(Region(0, y, room.width, 1))

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - self.header_height)

    def action_cursor_up(self) -> None:
        self.move_cursor(self._cursor - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self._cursor + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self._cursor - self._page())

    def action_page_down(self) -> None:
        self.move_cursor(self._cursor + self._page())

    def action_first_row(self) -> None:
        self.move_cursor(0)

    def action_last_row(self) -> None:
        self.move_cursor(len(self._keys) - 1)

    def action_home(self) -> None:
        self.action_first_row()

    def action_end(self) -> None:
        self.action_last_row()

    def action_scroll_home(self) -> None:
        self.scroll_to(x=0, animate=False)

    def action_scroll_end(self) -> None:
        self.scroll_to(x=self.max_scroll_x, animate=False)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < self.header_height:
            return  # the header or the border
        row = round(self.scroll_offset.y) + offset.y - self.header_height
        if row < len(self._keys):  # not the blank below the last row
            self.move_cursor(row)

    # -- drawing --------------------------------------------------------------------------

    def _current_frame(self) -> tuple[int, int, int]:
        """The pane's width and its top and left scroll offsets."""
        region = self.scrollable_content_region
        return region.width, round(self.scroll_offset.y), round(self.scroll_offset.x)

    def render_lines(self, crop: Region) -> list[Strip]:
        # The pane's width and scroll offsets cannot change within one repaint: read once.
        self._frame = self._current_frame()
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def render_line(self, y: int) -> Strip:
        # Outside a repaint (a test reading a line), read the frame now.
        width, top, left = self._frame or self._current_frame()
        if y < self.header_height:
            cells: Iterable[Cell] = [(header, "") for header in self._headers]
            look: Hashable = ("header", self._headers)
            key: str | None = None
            style, cursor = self._style("header"), False
        else:
            index = top + y - self.header_height
            if not 0 <= index < len(self._keys):
                return Strip.blank(width, self.rich_style)
            key, cursor = self._keys[index], index == self._cursor
            cells = self._cells[key]
            look = (cells, index % 2, cursor)
            style = self._style("cursor" if cursor else "row", index % 2)
        # A line is drawn across the pane (or the table, if wider), in the row's style.
        look = (look, style, width, self._widths)
        kept = self._strips.get(key)
        if kept is None or kept[0] != look:
            kept = self._strips[key] = (look, self._strip(cells, style, cursor, width))
        line = kept[1]
        return line if left == 0 and line.cell_length == width else line.crop(left, left + width)

    def _strip(self, cells: Iterable[Cell], row: Style, cursor: bool, width: int) -> Strip:
        """One line: each cell's text padded to its column, in the row's style with the
        cell's own on top (under the cursor's colours, which win as in DataTable), then
        blank to the pane's edge."""
        segments = []
        length = 0
        for (text, style), column in zip(cells, self._widths):
            padded = " " * PADDING + text + " " * (column - cell_len(text) + PADDING)
            segments.append(Segment(padded, self._cell_style(row, style, cursor)))
            length += column + 2 * PADDING
        if length < width:
            segments.append(Segment(" " * (width - length), row))
        return Strip(segments, max(length, width))

    def _cell_style(self, row: Style, style: str, cursor: bool) -> Style:
        if not style:
            return row
        key = (row, style, cursor)
        composed = self._styles.get(key)
        if composed is None:
            own = self.app.console.get_style(style)
            if cursor:  # the cursor's colours win; the cell keeps its weight and decoration
                own = Style(bold=own.bold, dim=own.dim, italic=own.italic)
            composed = self._styles[key] = row + own
        return composed

    def _style(self, kind: str, index_parity: int | None = None) -> Style:
        """The row's style: the widget's, with the stripe, the cursor or the header on top."""
        key = (kind, index_parity, self.has_focus)
        style = self._styles.get(key)
        if style is None:
            style = self.rich_style
            # Whole component styles: their colours blended over the pane's (a partial style
            # drops a colour's alpha, and `$primary 30%` would be drawn opaque).
            if kind == "header":
                style += self.get_component_rich_style("row-table--header")
            elif index_parity == 0:
                style += self.get_component_rich_style("row-table--stripe")
            if kind == "cursor":
                style += self.get_component_rich_style("row-table--cursor")
            self._styles[key] = style
        return style

    def _restyle(self) -> None:
        self._styles.clear()
        self._strips.clear()
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._restyle()

    def on_focus(self) -> None:
        self._restyle()

    def on_blur(self) -> None:
        self._restyle()
