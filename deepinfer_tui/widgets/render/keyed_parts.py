"""The pieces of `keyed_table` that are not the table: which private DataTable methods this
Textual has (checked once, at import), what a cell's look depends on, and a drawn line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from rich.segment import Segment
from rich.text import Text
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

try:  # DataTable's own line crop, so a cropped line is cut exactly as DataTable cuts it
    from textual._segment_tools import line_crop
except ImportError:  # pragma: no cover - depends on the installed Textual
    line_crop = None  # type: ignore[assignment]

SegmentLines = list[list[Segment]]
SMALL_CACHE = 256  # entries: a few screens of lines


def _parameters(function: Callable[..., Any] | None) -> list[str]:
    try:
        return list(inspect.signature(function).parameters) if function else []
    except (TypeError, ValueError):
        return []


def _hookable(name: str, *parameters: str) -> bool:
    return _parameters(getattr(DataTable, name, None)) == ["self", *parameters]


RENDER_CELL_HOOKABLE = _hookable(
    "_render_cell", "row_index", "column_index", "base_style", "width", "cursor", "hover"
)
STYLES_HOOKABLE = _hookable(
    "_get_styles_to_render_cell",
    "is_header_cell",
    "is_row_label_cell",
    "is_fixed_style_cell",
    "hover",
    "cursor",
    "show_cursor",
    "show_hover_cursor",
    "has_css_foreground_priority",
    "has_css_background_priority",
)
LINES_HOOKABLE = (
    line_crop is not None
    and _hookable("_render_line", "y", "x1", "x2", "base_style")
    and _hookable("_get_offsets", "y")
    and _hookable("_get_row_style", "row_index", "base_style")
)
# Instance attributes the line path reads; DataTable's constructor sets them.
LINE_ATTRIBUTES = (
    "_data",
    "_row_locations",
    "_labelled_row_exists",
    "_show_hover_cursor",
)


class Flags(NamedTuple):
    """Everything besides content, position and row style that a cell's look depends on."""

    show_cursor: bool
    show_hover_cursor: bool
    foreground_priority: str
    background_priority: str
    padding: int
    fixed_rows: int
    fixed_columns: int
    pseudo_classes: Hashable


class Setup(NamedTuple):
    """What every line of one repaint shares."""

    column_keys: tuple[ColumnKey, ...]
    widths: tuple[int, ...]  # each column's render width, padding included
    remaining: int  # blank cells right of the last column
    flags: Flags


class Line:
    """One drawn line of a row: its cells' segments, joined into one strip."""

    __slots__ = ("starts_visible", "strip")

    def __init__(self, cells: SegmentLines) -> None:
        segments: list[Segment] = []
        # Each cell is simplified already, and neighbouring cells never share a style (the
        # cell's column is in its style's meta); join them anyway if they ever do.
        joined = False
        for cell in cells:
            if cell:
                if segments and segments[-1].style == cell[0].style:
                    joined = True
                segments.extend(cell)
        self.strip = Strip(Segment.simplify(segments) if joined else segments)
        # DataTable crops each line, which drops leading zero-width segments.
        self.starts_visible = bool(segments and segments[0].text)


def text_content(value: object) -> Hashable | None:
    """What a Text shows, as a hashable value; None for anything else."""
    if not isinstance(value, Text):
        return None
    style = value.style if isinstance(value.style, str) else str(value.style)
    spans = (
        tuple((span.start, span.end, str(span.style)) for span in value.spans)
        if value.spans
        else ()
    )
    return (value.plain, style, spans, value.justify, value.overflow, value.end)
