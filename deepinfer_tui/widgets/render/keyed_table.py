"""A DataTable whose render caches are keyed on each cell's content.

Textual's DataTable puts a table-wide update counter in every cell's, row's and line's cache
key, so a single `update_cell` re-renders every visible cell through Rich on the next repaint.
At 64 running requests that was the largest cost of a keypress. `ContentKeyedDataTable` keys
its caches on what a cell shows and how (text, styles, width, cursor, hover, zebra row style,
focus), so only cells whose content changed are rendered again; and it builds a one-line,
single-style `Text` cell's segments directly, in the exact shape Rich gives them.

Lines are assembled the same way: every visible row changes each round, and for each line it
draws DataTable looks up the header and zebra component styles (a walk over the widget's
ancestors), re-reads the column widths, and crops, pads and simplifies the joined cells. This
table reads those values once per repaint, keeps each cell's segments simplified, and keys
whole lines on their cells' content. A test compares what it draws with plain DataTable's.

All of this hooks private DataTable methods and attributes. Method signatures are checked at
import time, attributes when a table is built; with a Textual whose internals differ, the
table falls back to plain DataTable rendering (slower, still right).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, CellType, RowKey

from .keyed_parts import (
    LINE_ATTRIBUTES,
    LINES_HOOKABLE,
    RENDER_CELL_HOOKABLE,
    SMALL_CACHE,
    STYLES_HOOKABLE,
    Flags,
    Line,
    SegmentLines,
    Setup,
    line_crop,
    text_content,
)
from .repaint_style import StyleOncePerRepaint


class ContentKeyedDataTable(StyleOncePerRepaint, DataTable[CellType]):
    """DataTable with content-keyed cell and line caches and a direct text cell renderer."""

    content_keyed = RENDER_CELL_HOOKABLE  # False: render exactly as DataTable does
    direct_text_cells = RENDER_CELL_HOOKABLE and STYLES_HOOKABLE  # False: Rich renders cells
    keyed_lines = RENDER_CELL_HOOKABLE and STYLES_HOOKABLE and LINES_HOOKABLE  # False: DataTable's

    def __init__(self, **kwargs: Any) -> None:
        # Before DataTable's constructor, which already clears caches (ours included).
        # What each position (row index, column index / line) drew last, and what it showed:
        # a position draws the same thing again while what it shows is equal. Plain dicts
        # bounded by the table's size; cheaper than hashing each cell's key into an LRU cache.
        self._cells: dict[tuple[int, int], tuple[tuple[Hashable, ...], SegmentLines]] = {}
        self._lines: dict[tuple[int, int], tuple[tuple[Hashable, ...], Line]] = {}
        # Styles by cell position and state (not content): a changed cell's text is new,
        # its styles are those its position had last round.
        self._styles: LRUCache[Hashable, Any] = LRUCache(1024)
        self._pseudo_classes: Hashable = None
        # Values that cannot change within one repaint, read once per repaint; None outside
        # a repaint (a direct render_line call), when they are read for every line.
        self._repaint_memo: dict[Hashable, Any] | None = None
        super().__init__(**kwargs)
        if not all(hasattr(self, name) for name in LINE_ATTRIBUTES):
            self.keyed_lines = False
        # DataTable's own line and row caches are keyed on its update counter, so after an
        # update their old entries are never read again; at their default sizes (1000 and
        # more) they keep tens of thousands of dead objects for the garbage collector to scan.
        for name in ("_line_cache", "_row_render_cache", "_cell_render_cache"):
            cache = getattr(self, name, None)
            if isinstance(cache, LRUCache):
                cache.maxsize = min(cache.maxsize, SMALL_CACHE)

    def render_lines(self, crop: Region) -> list[Strip]:
        # Focus and hover change the cursor's colours: read them once per repaint, not per cell.
        self._pseudo_classes = self.get_pseudo_class_state()
        self._repaint_memo = {}
        try:
            return super().render_lines(crop)
        finally:
            self._repaint_memo = None

    def _memo(self, key: Hashable, compute: Callable[..., Any], *arguments: Any) -> Any:
        memo = self._repaint_memo
        if memo is None:
            return compute(*arguments)
        if key not in memo:
            memo[key] = compute(*arguments)
        return memo[key]

    # -- lines --------------------------------------------------------------------------------

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        line = None
        if self.keyed_lines and self.content_keyed:
            try:
                row_key, line_no = self._get_offsets(y)
            except LookupError:
                return Strip.blank(self.size.width, base_style)  # below the rows, as DataTable
            where = (self.cursor_coordinate, self.hover_coordinate)
            line = self._keyed_line(row_key, line_no, base_style, *where)
        if line is None:
            return super()._render_line(y, x1, x2, base_style)
        strip, width = line.strip, self.size.width
        if x1 == 0 and strip.cell_length == x2 == width and line.starts_visible:
            return strip  # the whole line fits: DataTable's crop and padding change nothing
        assert line_crop is not None  # keyed_lines is off without it
        segments = line_crop(list(strip), x1, x2, strip.cell_length)
        return Strip(segments).adjust_cell_length(width, base_style).simplify()

    def _keyed_line(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: Style,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> Line | None:
        """One line of a row, from a cache keyed on its cells' content; None: not handled.

        Handles the tables this app draws (row cursor, no row labels, no fixed columns,
        one-line Text cells); anything else is left to DataTable.
        """
        setup: Setup | None = self._memo("setup", self._line_setup)
        if setup is None:
            return None
        row_index = self._row_locations.get(row_key)
        if row_index is None:
            row_index = -1  # the header row
        found = self._row_content(row_key, row_index, setup)
        if found is None:
            return None
        contents, values = found
        row_style = self._row_style(row_index, base_style, setup)
        # Cursor type "row": a cell is highlighted when its row is the cursor's (or hover's).
        cursor = cursor_location.row == row_index
        hover = hover_location.row == row_index
        # DataTable puts the row and column index in each cell's style meta: lines are kept
        # by position.
        shows = (contents, row_style, cursor, hover, setup.widths, setup.remaining, setup.flags)
        drawn = self._lines.get((row_index, line_no))
        if drawn is not None and drawn[0] == shows:
            return drawn[1]
        cells: SegmentLines = []
        for column_index, (content, value, width) in enumerate(zip(contents, values, setup.widths)):
            where = (row_index, column_index, row_style, width, cursor, hover)
            cells.append(self._keyed_cell(content, value, *where, setup.flags)[line_no])
        # The blank right of the last column, styled as DataTable extends a row.
        style_key = ("extend", row_index, row_style, cursor, hover, setup.flags)
        extend_style = self._styles.get(style_key)
        if extend_style is None:
            component, _ = self._get_styles_to_render_cell(
                row_index == -1,
                False,
                False,
                hover,
                cursor,
                setup.flags.show_cursor,
                setup.flags.show_hover_cursor,
                False,
                False,
            )
            meta = Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
            extend_style = self._styles[style_key] = row_style + component + meta
        cells.append([Segment(" " * setup.remaining, extend_style)])
        line = Line(cells)
        self._lines[row_index, line_no] = (shows, line)
        return line

    def _line_setup(self) -> Setup | None:
        if (
            self.cursor_type != "row"
            or self.fixed_columns
            or (self._labelled_row_exists and self.show_row_labels)
        ):
            return None
        columns = self.ordered_columns
        widths = tuple(column.get_render_width(self) for column in columns)
        return Setup(
            column_keys=tuple(column.key for column in columns),
            widths=widths,
            remaining=max(0, self.size.width - sum(widths)),
            flags=self._cell_flags(),
        )

    def _row_content(
        self, row_key: RowKey, row_index: int, setup: Setup
    ) -> tuple[tuple[Hashable, ...], list[object]] | None:
        """Every cell's content (hashable) and value, in column order; None if any cell is not
        a one-line Text."""
        if row_index < 0:
            values: list[object] = [column.label for column in self.ordered_columns]
            # Header cells are rendered by Rich, whose lines depend on the header's height.
            identity: Hashable = ("header", self.header_height)
        else:
            row = self.rows.get(row_key)
            cells = self._data.get(row_key)
            if row is None or cells is None or row.height != 1:
                return None  # auto-height rows are measured by rendering: leave them alone
            values = [cells.get(key) for key in setup.column_keys]
            identity = None
        contents = []
        for value in values:
            content = text_content(value)
            if content is None:
                return None
            contents.append((identity, content))
        return tuple(contents), values

    def _row_style(self, row_index: int, base_style: Style, setup: Setup) -> Style:
        # The header, fixed rows, then zebra parity: all DataTable's row style depends on.
        if row_index == -1:
            kind: Hashable = "header"
        elif row_index < setup.flags.fixed_rows:
            kind = "fixed"
        else:
            kind = row_index % 2
        style: Style = self._memo(
            ("row", kind, base_style), self._get_row_style, row_index, base_style
        )
        return style

    # -- cells --------------------------------------------------------------------------------

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        where = (row_index, column_index, base_style, width, cursor, hover)
        if not self.content_keyed:
            return super()._render_cell(*where)
        found = self._cell_content(row_index, column_index)
        if found is None:
            return super()._render_cell(*where)
        content, value = found
        return self._keyed_cell(content, value, *where, self._cell_flags())

    def _cell_flags(self) -> Flags:
        """Everything besides content, position and row style that a cell's look depends on."""
        return Flags(
            self.show_cursor,
            getattr(self, "_show_hover_cursor", False),
            self.cursor_foreground_priority,
            self.cursor_background_priority,
            self.cell_padding,
            self.fixed_rows,
            self.fixed_columns,
            self._pseudo_classes,
        )

    def _keyed_cell(
        self,
        content: Hashable,
        value: object,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
        flags: Flags,
    ) -> SegmentLines:
        """The cell's lines as last drawn at its position if it shows the same; else new."""
        shows = (content, base_style, width, cursor, hover, flags)
        drawn = self._cells.get((row_index, column_index))
        if drawn is not None and drawn[0] == shows:
            return drawn[1]
        where = (row_index, column_index, base_style, width, cursor, hover)
        direct = self.direct_text_cells and row_index >= 0
        lines = (self._render_text_cell(value, *where, flags) if direct else None) or [
            list(Segment.simplify(line)) for line in super()._render_cell(*where)
        ]
        self._cells[row_index, column_index] = (shows, lines)
        return lines

    def _cell_content(self, row_index: int, column_index: int) -> tuple[Hashable, object] | None:
        """What a cell shows, as a hashable value, and the cell's value; None: not one-line Text."""
        if column_index < 0:
            return None  # row labels: this table has none; DataTable renders them
        if row_index < 0:
            columns = self.ordered_columns
            if column_index >= len(columns):
                return None
            column = columns[column_index]
            value: object = column.label
            identity: Hashable = ("header", column.key, self.header_height)
        else:
            try:
                row_key, column_key = self.coordinate_to_cell_key(
                    Coordinate(row_index, column_index)
                )
                value = self.get_cell(row_key, column_key)
            except CellDoesNotExist:
                return None
            row = self.rows.get(row_key)
            if row is None or row.height != 1:
                return None  # auto-height rows are measured by rendering: leave them alone
            identity = (row_key, column_key)
        content = text_content(value)
        return None if content is None else ((identity, content), value)

    def _render_text_cell(
        self,
        value: object,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
        flags: Flags,
    ) -> SegmentLines | None:
        """The segments Rich would give a one-line, single-style Text cell, simplified (equal
        neighbours joined, as DataTable does to each line); None if the cell is not one."""
        if not isinstance(value, Text) or value.spans or value.justify not in (None, "default"):
            return None
        padding = flags.padding
        inner = width - 2 * padding
        text = value.plain
        length = cell_len(text)
        if inner < 0 or length > inner or "\n" in text or "\t" in text or not text.isprintable():
            return None  # cropped, wrapped or control characters: Rich's job
        key = ("cell", row_index, column_index, base_style, cursor, hover, flags, value.style)
        styles = self._styles.get(key)
        if styles is None:
            fixed = row_index < flags.fixed_rows or column_index < flags.fixed_columns
            component, post = self._get_styles_to_render_cell(
                False,
                False,
                fixed,
                hover,
                cursor,
                flags.show_cursor,
                flags.show_hover_cursor,
                flags.foreground_priority == "css",
                flags.background_priority == "css",
            )
            pre = base_style + Style.from_meta({"row": row_index, "column": column_index})
            pre = pre + component
            own = self.app.console.get_style(value.style) if value.style else None
            text_style = (pre + own if own else pre) + post
            styles = self._styles[key] = (pre + post, text_style, own is not None)
        blank, text_style, styled = styles
        segments = []
        if padding:
            segments.append(Segment(" " * padding, blank))
        if text or not styled:  # Rich keeps an empty unstyled text as an empty segment
            segments.append(Segment(text, text_style))
        if inner > length:
            segments.append(Segment(" " * (inner - length), blank))
        if padding:
            segments.append(Segment(" " * padding, blank))
        return [list(Segment.simplify(segments))]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # Component styles (cursor, zebra, theme) may have changed.
        self._clear_keyed_caches()

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._clear_keyed_caches()

    def _clear_keyed_caches(self) -> None:
        self._cells.clear()
        self._lines.clear()
        self._styles.clear()
