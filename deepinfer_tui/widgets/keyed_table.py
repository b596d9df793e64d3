"""A DataTable whose cell render cache is keyed on each cell's content.

Textual's DataTable puts a table-wide update counter in every cell's cache key, so a single
`update_cell` re-renders every visible cell through Rich on the next repaint. At 64 running
requests that was the largest cost of a keypress. `ContentKeyedDataTable` keys the cache on what
a cell shows and how (text, styles, width, cursor, hover, zebra row style, focus), so only cells
whose content changed are rendered again; and it builds a one-line, single-style `Text` cell's
segments directly, in the exact shape Rich gives them (a test compares the two).

Both hook private DataTable methods. Their signatures are checked at import time; with a Textual
whose internals differ, the table falls back to plain DataTable rendering (slower, still right).
"""

from __future__ import annotations

import inspect
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
from textual.widgets.data_table import CellDoesNotExist, CellType

from .repaint_style import StyleOncePerRepaint

SegmentLines = list[list[Segment]]
SMALL_CACHE = 256  # entries: a few screens of lines


def _parameters(function: Callable[..., Any] | None) -> list[str]:
    try:
        return list(inspect.signature(function).parameters) if function else []
    except (TypeError, ValueError):
        return []


RENDER_CELL_HOOKABLE = _parameters(getattr(DataTable, "_render_cell", None)) == [
    "self",
    "row_index",
    "column_index",
    "base_style",
    "width",
    "cursor",
    "hover",
]
STYLES_HOOKABLE = _parameters(getattr(DataTable, "_get_styles_to_render_cell", None)) == [
    "self",
    "is_header_cell",
    "is_row_label_cell",
    "is_fixed_style_cell",
    "hover",
    "cursor",
    "show_cursor",
    "show_hover_cursor",
    "has_css_foreground_priority",
    "has_css_background_priority",
]


class ContentKeyedDataTable(StyleOncePerRepaint, DataTable[CellType]):
    """DataTable with a per-cell content cache and a direct renderer for plain text cells."""

    content_keyed = RENDER_CELL_HOOKABLE  # False: render exactly as DataTable does
    direct_text_cells = RENDER_CELL_HOOKABLE and STYLES_HOOKABLE  # False: Rich renders cells

    def __init__(self, **kwargs: Any) -> None:
        # Before DataTable's constructor, which already clears caches (ours included).
        self._cells: LRUCache[Hashable, SegmentLines] = LRUCache(1024)
        self._pseudo_classes: Hashable = None
        super().__init__(**kwargs)
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
        return super().render_lines(crop)

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        render = super()._render_cell
        if not self.content_keyed:
            return render(row_index, column_index, base_style, width, cursor, hover)
        content = self._cell_content(row_index, column_index)
        if content is None:
            return render(row_index, column_index, base_style, width, cursor, hover)
        key = (
            row_index,  # DataTable puts the row and column index in each cell's style meta
            column_index,
            content,
            base_style,
            width,
            cursor,
            hover,
            self.show_cursor,
            getattr(self, "_show_hover_cursor", None),
            self.cursor_foreground_priority,
            self.cursor_background_priority,
            self.cell_padding,
            self._pseudo_classes,
        )
        lines = self._cells.get(key)
        if lines is None:
            direct = self.direct_text_cells and row_index >= 0
            arguments = (row_index, column_index, base_style, width, cursor, hover)
            lines = (self._render_text_cell(*arguments) if direct else None) or render(*arguments)
            self._cells[key] = lines
        return lines

    def _cell_content(self, row_index: int, column_index: int) -> Hashable | None:
        """What a cell shows, as a hashable value; None when it is not a one-line Text."""
        if column_index < 0:
            return None  # row labels: this table has none; DataTable renders them
        if row_index < 0:
            columns = self.ordered_columns
            if column_index >= len(columns):
                return None
            column = columns[column_index]
            value: object = column.label
            identity: tuple[object, ...] = ("header", column.key, self.header_height)
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
        if not isinstance(value, Text):
            return None
        style = value.style if isinstance(value.style, str) else str(value.style)
        spans = tuple((span.start, span.end, str(span.style)) for span in value.spans)
        return (*identity, value.plain, style, spans, value.justify, value.overflow, value.end)

    def _render_text_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool,
        hover: bool,
    ) -> SegmentLines | None:
        """The segments Rich would give a one-line, single-style Text cell; None if not one."""
        row_key, column_key = self.coordinate_to_cell_key(Coordinate(row_index, column_index))
        value = self.get_cell(row_key, column_key)
        if not isinstance(value, Text) or value.spans or value.justify not in (None, "default"):
            return None
        padding = self.cell_padding
        inner = width - 2 * padding
        text = value.plain
        length = cell_len(text)
        if inner < 0 or length > inner or "\n" in text or "\t" in text or not text.isprintable():
            return None  # cropped, wrapped or control characters: Rich's job
        fixed = row_index < self.fixed_rows or column_index < self.fixed_columns
        component, post = self._get_styles_to_render_cell(
            False,
            False,
            fixed,
            hover,
            cursor,
            self.show_cursor,
            getattr(self, "_show_hover_cursor", False),
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index})
        pre = pre + component
        own = self.app.console.get_style(value.style) if value.style else None
        blank = pre + post
        segments = []
        if padding:
            segments.append(Segment(" " * padding, blank))
        if text or not own:  # Rich keeps an empty unstyled text as an empty segment
            segments.append(Segment(text, (pre + own if own else pre) + post))
        if inner > length:
            segments.append(Segment(" " * (inner - length), blank))
        if padding:
            segments.append(Segment(" " * padding, blank))
        return [segments]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cells.clear()  # component styles (cursor, zebra, theme) may have changed

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cells.clear()
