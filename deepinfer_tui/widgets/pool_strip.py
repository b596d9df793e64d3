"""The whole-pool strip: one glyph per KV block, in groups of eight, wrapped to the pane.

A Line-API widget: a pool holds hundreds or thousands of blocks, so only the rows on screen are
turned into strips, and a round that changed no block's state draws nothing. Rows wrap the way
Rich word-wraps the same text (the groups are the words), so it reads like the rest of the pane.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from .legend import BLOCK_MARKS
from .view import RequestView, View

POOL_GROUP = 8  # glyphs per group, so rows wrap at readable boundaries
Glyph = tuple[str, str]  # (symbol, style)


def pool_header(view: View) -> str:
    pool = view.snapshot.get("pool", {})
    return (
        f"pool · {pool.get('num_blocks', 0)} blocks × {pool.get('block_size', 0)} slots"
        " (reverse = this request's)"
    )


def pool_glyphs(view: View, request: RequestView | None) -> tuple[Glyph, ...]:
    """Each block's glyph and style; the selected request's blocks in reverse video."""
    mine = {b["id"] for b in request.get("blocks", [])} if request else set()
    glyphs = []
    for block in view.snapshot.get("pool", {}).get("blocks", []):
        mark = BLOCK_MARKS.get(block["state"], BLOCK_MARKS["free"])
        glyphs.append((mark.symbol, f"{mark.style} reverse" if block["id"] in mine else mark.style))
    return tuple(glyphs)


def glyph_rows(count: int, width: int) -> list[tuple[int, int, bool]]:
    """(first glyph, end glyph, gaps between groups) for each row of `count` glyphs."""
    if count == 0 or width <= 0:
        return []
    if width < POOL_GROUP:
        # Narrower than a group: each group folds into rows of `width` glyphs, no gaps.
        return [
            (start, min(start + width, group + POOL_GROUP, count), False)
            for group in range(0, count, POOL_GROUP)
            for start in range(group, min(group + POOL_GROUP, count), width)
        ]
    per_row = (width + 1) // (POOL_GROUP + 1) * POOL_GROUP
    return [(start, min(start + per_row, count), True) for start in range(0, count, per_row)]


class PoolStrip(Widget):
    """Draws `pool_header` and the glyphs of `pool_glyphs`; `show` skips unchanged pools."""

    DEFAULT_CSS = """
    PoolStrip {
        height: auto;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._header = ""
        self._glyphs: tuple[Glyph, ...] = ()
        self._wrapped: tuple[int, list[str], list[tuple[int, int, bool]]] | None = None
        self._styles: dict[str, Style] = {}

    @property
    def glyphs(self) -> tuple[Glyph, ...]:
        return self._glyphs

    def show(self, view: View, request: RequestView | None) -> None:
        header, glyphs = pool_header(view), pool_glyphs(view, request)
        if header == self._header and glyphs == self._glyphs:
            return
        rows_before = self._row_count(self.size.width)
        self._header, self._glyphs = header, glyphs
        self._wrapped = None
        self.refresh(layout=self._row_count(self.size.width) != rows_before)

    def _layout(self, width: int) -> tuple[list[str], list[tuple[int, int, bool]]]:
        """The header's wrapped lines and the glyph rows at this width (cached per width)."""
        if self._wrapped is None or self._wrapped[0] != width:
            header = [line.plain for line in Text(self._header).wrap(self.app.console, width)]
            self._wrapped = (width, header, glyph_rows(len(self._glyphs), width))
        return self._wrapped[1], self._wrapped[2]

    def _row_count(self, width: int) -> int:
        if width <= 0 or not self.is_mounted:
            return 0
        header, rows = self._layout(width)
        return len(header) + len(rows)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._row_count(width)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = Style.parse(name)
        return style

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        header, rows = self._layout(width)
        segments: list[Segment] = []
        if y < len(header):
            segments.append(Segment(header[y], base + self._style("bold")))
        elif y - len(header) < len(rows):
            start, end, gaps = rows[y - len(header)]
            segments = self._glyph_segments(start, end, gaps, base)
        return Strip(segments).adjust_cell_length(width, base)

    def _glyph_segments(self, start: int, end: int, gaps: bool, base: Style) -> list[Segment]:
        """Runs of equal style become one segment; groups are parted by an unstyled space."""
        segments: list[Segment] = []
        run: list[str] = []
        run_style = ""
        for index in range(start, end):
            symbol, style = self._glyphs[index]
            gap = gaps and index > start and index % POOL_GROUP == 0
            if run and (gap or style != run_style):
                segments.append(Segment("".join(run), base + self._style(run_style)))
                run = []
            if gap:
                segments.append(Segment(" ", base))
            run_style = style
            run.append(symbol)
        if run:
            segments.append(Segment("".join(run), base + self._style(run_style)))
        return segments
