"""The whole-pool strip: one glyph per KV block, in groups of eight, wrapped to the pane.

A pool holds hundreds or thousands of blocks, so the block map draws only the strip's rows on
screen, each straight from the glyph list. Rows wrap the way Rich word-wraps the same text
(the groups are the words), so the strip reads like the rest of the pane.
"""

from __future__ import annotations

from typing import NamedTuple

from rich.segment import Segment
from rich.style import Style

from ..legend import BLOCK_MARKS
from .view import RequestView, View

POOL_GROUP = 8  # glyphs per group, so rows wrap at readable boundaries


Glyph = tuple[str, str]  # (symbol, style); plain tuples of strings stay out of the GC's way


class GlyphRow(NamedTuple):
    start: int  # first glyph
    end: int  # one past the last glyph
    gaps: bool  # a space parts groups of POOL_GROUP glyphs


def pool_header(view: View) -> str:
    pool = view.snapshot.get("pool", {})
    return (
        f"pool · {pool.get('num_blocks', 0):,} blocks × {pool.get('block_size', 0):,} slots"
        " (reverse = this request's)"
    )


def pool_glyphs(view: View, request: RequestView | None) -> tuple[Glyph, ...]:
    """Each block's glyph and style; the selected request's blocks in reverse video."""
    mine = {b["id"] for b in request.get("blocks", [])} if request else set()
    glyphs = []
    for block in view.snapshot.get("pool", {}).get("blocks", []):
        mark = BLOCK_MARKS.get(block["state"], BLOCK_MARKS["free"])
        style = f"{mark.style} reverse" if block["id"] in mine else mark.style
        glyphs.append((mark.symbol, style))
    return tuple(glyphs)


def glyph_rows(count: int, width: int) -> list[GlyphRow]:
    """How `count` glyphs wrap into rows `width` cells wide."""
    if count == 0 or width <= 0:
        return []
    if width < POOL_GROUP:
        # Narrower than a group: each group folds into rows of `width` glyphs, no gaps.
        return [
            GlyphRow(start, min(start + width, group + POOL_GROUP, count), False)
            for group in range(0, count, POOL_GROUP)
            for start in range(group, min(group + POOL_GROUP, count), width)
        ]
    per_row = (width + 1) // (POOL_GROUP + 1) * POOL_GROUP
    return [
        GlyphRow(start, min(start + per_row, count), True) for start in range(0, count, per_row)
    ]


def glyph_segments(glyphs: tuple[Glyph, ...], row: GlyphRow, base: Style) -> list[Segment]:
    """One row's segments: runs of equal style are one segment; gaps are unstyled spaces.

    Style names are parsed by `Style.parse`, which Rich caches, so a repaint parses none.
    """
    segments: list[Segment] = []
    run: list[str] = []
    run_style = ""
    for index in range(row.start, row.end):
        symbol, style = glyphs[index]
        gap = row.gaps and index > row.start and index % POOL_GROUP == 0
        if run and (gap or style != run_style):
            segments.append(Segment("".join(run), base + Style.parse(run_style)))
            run = []
        if gap:
            segments.append(Segment(" ", base))
        run_style = style
        run.append(symbol)
    if run:
        segments.append(Segment("".join(run), base + Style.parse(run_style)))
    return segments
