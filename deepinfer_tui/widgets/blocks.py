"""The KV block map: the selected request's block table, then a strip of the whole pool."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from rich.text import Text
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import Visual, visualize

from ..columns import schedule_state
from ..describe import Holders, format_blocks, format_tokens, restore_counts
from ..legend import BLOCK_MARKS, CACHE_MARKS, SLOT_MARKS, pool_legend, status_mark
from .block_rows import SLOT_FORM_MAX_SLOTS, compact_lines, no_blocks_reason, wants_compact
from .pool_strip import Glyph, GlyphRow, glyph_rows, glyph_segments, pool_glyphs, pool_header
from .render.quiet import refresh_rows, set_scroll_extent, shows_scrollbar
from .render.text_strips import fitting_line, wrapped_lines
from .view import RequestView, View

SLOTS_PER_ROW = 8  # a block's slots per line of the block table


def _this_round(request: RequestView, tick: int) -> Mapping[str, Any] | None:
    commit = request.get("last_commit")
    if commit and commit.get("round") == tick:
        return commit
    return None


def block_table_lines(request: RequestView, view: View) -> list[Text]:
    """The block table, one text per line: the map renders each line once and reuses it
    while it is unchanged (a round changes a few lines: the heading, the last block)."""
    snapshot = view.snapshot
    pool = snapshot.get("pool", {})
    vocab = int(snapshot.get("models", {}).get("target", {}).get("vocab_size", 100))
    digits = len(str(max(vocab - 1, 0)))
    id_width = len(str(max(int(pool.get("num_blocks", 1)) - 1, 0))) + 1
    committed = int(request.get("committed_positions", 0))
    window = range(*request.get("window", [0, 0]))
    commit = _this_round(request, view.tick)
    rolled_back: set[int] = set()
    if commit:
        rolled_back = {p for p in commit.get("speculative_positions", []) if p >= committed}

    lines = [_heading(request, committed, window)]
    restore = request.get("restore")
    if restore:
        lines.append(_restore_line(restore, request))
    blocks = request.get("blocks", [])
    if not blocks:
        for reason in no_blocks_reason(request, view):
            lines.append(Text().append(reason, style="italic"))
    block_size = int(pool.get("block_size", 1))
    written: set[int] = set()  # positions this round committed
    if commit:
        written = set(range(committed - len(commit.get("tokens", ())), committed))
    rows = _block_rows(blocks, snapshot, block_size, digits, id_width, window, rolled_back, written)
    lines.extend(rows)
    for block_id in request.get("dropped_blocks", []):
        lines.extend(_dropped_lines(block_id, digits, id_width, block_size))
    for event in view.events_this_tick(str(request["id"]), "rollback"):
        text = Text()
        text.append(f"rolled back {format_tokens(event.get('removed', []))}", style="bold yellow")
        freed = event.get("freed_blocks", [])
        if freed:
            text.append(" · freed " + format_blocks(freed), style="yellow")
        lines.append(text)
    if commit:
        lines.append(_commit_line(commit))
    lines[-1].rstrip()
    return lines


def _block_rows(
    blocks: Sequence[Mapping[str, Any]],
    snapshot: Mapping[str, Any],
    block_size: int,
    digits: int,
    id_width: int,
    window: range,
    rolled_back: set[int],
    written: set[int],
) -> list[Text]:
    """The request's blocks: slot by slot, or compactly for many or large blocks."""

    def slot_lines(block: Mapping[str, Any]) -> list[Text]:
        lines = _block_line(block, digits, id_width, window, rolled_back)
        if block["state"] == "shared":
            lines[-1].append(f" ({holders_of(block)})", style="bright_black")
        return lines

    held_by = Holders(snapshot)

    def holders_of(block: Mapping[str, Any]) -> str:
        return held_by.of(int(block["id"]), int(block["refcount"]))

    if wants_compact(blocks, block_size):
        # The window's blocks and those this round wrote or rolled back keep rows of their own.
        touched = set(rolled_back) | written

        def expanded(block: Mapping[str, Any]) -> bool:
            span = range(int(block["first_position"]), int(block["first_position"]) + block_size)
            return bool(window and window.start < span.stop and span.start < window.stop) or any(
                position in span for position in touched
            )

        return compact_lines(blocks, block_size, expanded, slot_lines, holders_of)
    return [line for block in blocks for line in slot_lines(block)]


def _heading(request: RequestView, committed: int, window: range) -> Text:
    text = Text()
    mark = status_mark(request)
    text.append(f"{request['id']} ", style="bold")
    text.append(f"{mark.symbol} {schedule_state(request)}", style=mark.style)
    # A request without blocks says what it waits for on a line of its own, below.
    if request.get("waiting_for") and request["status"] != "finished" and request.get("blocks"):
        text.append(f" ({request['waiting_for']})", style="bright_black")
    if request["status"] == "finished":  # it holds no rows and waits for no token any more
        text.append(f" · {len(request.get('generated', ()))} generated")
    else:
        # The pending token in brackets, as tokens are shown everywhere: not a count.
        text.append(f" · {committed} in KV · pending [{request.get('pending_token')}]")
    if window:
        text.append(" · window ")
        text.append(f"‹{window.start}–{window.stop - 1}›", style=SLOT_MARKS["window"].style)
    return text


def _restore_line(restore: Mapping[str, Any], request: RequestView) -> Text:
    text = Text()
    kind = restore["cache"]
    text.append(f"restore {kind}", style=CACHE_MARKS[kind].style if kind in CACHE_MARKS else "")
    text.append(f": {restore_counts(restore, request)}")
    text.append(f" ({restore['reason']})", style="bright_black")
    return text


def _block_line(
    block: Mapping[str, Any], digits: int, id_width: int, window: range, rolled_back: set[int]
) -> list[Text]:
    """A block slot by slot, SLOTS_PER_ROW slots a line: a larger block's lines line up under
    its first instead of wrapping wherever the pane ends."""
    lines = [Text()]
    first = int(block["first_position"])
    lines[0].append(f"#{block['id']}".ljust(id_width + 1))
    lines[0].append("[")
    for offset, token in enumerate(block["slots"]):
        if offset and offset % SLOTS_PER_ROW == 0:
            lines.append(Text(" " * (id_width + 2)))
        text, position = lines[-1], first + offset
        if token is None:
            symbol = "×" if position in rolled_back else "·"
            style = SLOT_MARKS["rolled_back" if position in rolled_back else "empty"].style
            text.append(f" {symbol:>{digits}} ", style=style)
        elif position in window:
            text.append(f"‹{token:>{digits}}›", style="bold underline")
        else:
            text.append(f" {token:>{digits}} ")
    text = lines[-1]
    text.append("]")
    state = BLOCK_MARKS.get(block["state"], BLOCK_MARKS["committed"])
    text.append(f" ref {block['refcount']} ")
    text.append(f"{state.symbol} {block['state']}", style=state.style)
    return lines


def _dropped_lines(block_id: int, digits: int, id_width: int, block_size: int) -> list[Text]:
    """A block this round dropped: every slot rolled back, laid out as a held block's slots
    (SLOTS_PER_ROW a line), or in one word for a large block."""
    if block_size > SLOT_FORM_MAX_SLOTS:
        text = Text()
        text.append(f"#{block_id}".ljust(id_width + 1))
        text.append(f"[ {block_size:,} × ]", style=BLOCK_MARKS["dropped"].style)
        text.append(" ref 0 ")
        text.append(f"{BLOCK_MARKS['dropped'].symbol} dropped", style=BLOCK_MARKS["dropped"].style)
        lines = [text]
    else:
        block = {"id": block_id, "first_position": 0, "slots": [None] * block_size}
        block.update(refcount=0, state="dropped")
        lines = _block_line(block, digits, id_width, range(0), set(range(block_size)))
    lines[-1].append(" (rolled back this round)")
    return lines


def _commit_line(commit: Mapping[str, Any]) -> Text:
    text = Text()
    text.append(
        f"round {commit['round']}: verified {commit['verified']}, "
        f"accepted {commit['accepted']}, committed {len(commit['tokens'])} "
        f"({commit['outcome']})"
    )
    if commit.get("rolled_back_positions"):
        text.append(f", rolled back {commit['rolled_back_positions']}", style="red")
    return text


class BlockMap(ScrollView, can_focus=True):
    """The selected request's block table, the pool strip and its legend, as one page of rows.

    One Line-API widget rather than three stacked Statics: when the block table gains or loses a
    line, only the scroll range changes, so a keypress needs no screen layout (which would cost
    it two more frames), and the pool strip draws only the rows on screen. A round changes a
    few rows (the table's heading and last block, some pool glyphs): each table line is
    rendered once and reused while unchanged, and only rows that changed are repainted.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"block-map--legend"}
    DEFAULT_CSS = """
    BlockMap {
        overflow-x: hidden;
        overflow-y: scroll;
    }
    BlockMap > .block-map--legend {
        color: $text-muted;
    }
    """

    direct_lines = True  # False: every line goes through Textual's Content (slower, the same)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: tuple[Text, ...] = ()
        self._table: Text | None = Text()
        self._header = ""
        self._glyphs: tuple[Glyph, ...] = ()
        self._layout: _Layout | None = None
        # Rendered lines by content, width and style: most of them are unchanged each round.
        self._strips: LRUCache[Hashable, list[Strip]] = LRUCache(1024)
        self._legends: dict[int, Text] = {}  # the pool legend packed to a width (it is fixed)

    @property
    def table(self) -> Text:
        """The block table now shown (the selected request's blocks)."""
        if self._table is None:
            self._table = Text("\n").join(self._lines)
        return self._table

    def show(self, view: View, request_id: str | None) -> None:
        request = view.request(request_id)
        lines: tuple[Text, ...]
        title: str | Content
        if request is None:
            lines = (Text("no request selected", style="italic"),)
            title = "KV blocks"
        else:
            lines = tuple(block_table_lines(request, view))
            # Plain Content: a title string is markup, and escape() misses tags such as [B].
            title = Content(f"KV blocks · {request['id']}")
        if self.border_title != title:
            self.border_title = title
        header, glyphs = pool_header(view), pool_glyphs(view, request)
        if (lines, header, glyphs) == (self._lines, self._header, self._glyphs):
            return
        before = (self._layout, self._glyphs)
        self._lines, self._header, self._glyphs = lines, header, glyphs
        self._table = None
        self._layout = None
        if not self._update_extent(repaint=False):
            self._refresh_changed_rows(*before)

    def _refresh_changed_rows(self, layout: _Layout | None, glyphs: tuple[Glyph, ...]) -> None:
        """Repaint the rows on screen that differ from what `layout` and `glyphs` showed."""
        now = self._rows()
        if layout is None or layout.width != now.width or not self.is_mounted:
            self.refresh()
            return
        top = round(self.scroll_offset.y)
        changed = (
            y
            for y in range(self.scrollable_content_region.height)
            if layout.row(top + y, glyphs) != now.row(top + y, self._glyphs)
        )
        refresh_rows(self, changed, now.width)

    # -- rows ---------------------------------------------------------------------------------

    def _rows(self) -> _Layout:
        """Every section's rows at the current width (computed once per content and width)."""
        width = self.scrollable_content_region.width
        if self._layout is None or self._layout.width != width:
            legend_style = self.get_visual_style("block-map--legend")
            style = self.visual_style
            self._layout = _Layout(
                width=width,
                table=[
                    strip for line in self._lines for strip in self._text_strips(line, width, style)
                ],
                header=self._text_strips(Text(self._header, style="bold"), width, style),
                glyph_rows=glyph_rows(len(self._glyphs), width),
                legend=self._text_strips(self._legend(width), width, legend_style),
            )
        return self._layout

    def _legend(self, width: int) -> Text:
        legend = self._legends.get(width)
        if legend is None:
            legend = self._legends[width] = pool_legend(width)
        return legend

    def _text_strips(self, text: Text, width: int, style: VisualStyle) -> list[Strip]:
        """The same rendering a Static gives this text (Textual's Content, wrapped to width);
        a line that fits is drawn by Rich directly, as it looks (7x faster: a round changes
        a few block-table lines, each one of these)."""
        if width <= 0:
            return []
        key = (text.plain, text.style, tuple(text.spans), width, style)
        strips = self._strips.get(key)
        if strips is None:
            console, base = self.app.console, style.rich_style
            strips = None
            if self.direct_lines:
                strips = fitting_line(console, text, width, base)
                if strips is None:
                    strips = wrapped_lines(console, text, width, base)
            if strips is None:
                strips = Visual.to_strips(self, visualize(self, text), width, None, style)
            self._strips[key] = strips
        return strips

    def _update_extent(self, repaint: bool = True) -> bool:
        """Fit the scroll range to the rows; True if the whole pane repaints (with
        `repaint=False`, only when the scrollbar comes or goes or the view scrolls)."""
        layout = self._rows()
        size = Size(layout.width, layout.height)
        if size == self.virtual_size:
            return False
        viewport = self.scrollable_content_region.height
        bar = shows_scrollbar(self, 1, size.height > viewport)
        if not self.is_mounted or not viewport or bar != self.show_vertical_scrollbar:
            self.virtual_size = size  # the scrollbar comes or goes: the screen lays out again
            return True
        scroll_y = self.scroll_y
        set_scroll_extent(self, size, repaint=repaint)
        return repaint or self.scroll_y != scroll_y

    def on_resize(self) -> None:
        self._layout = None
        self._update_extent()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._layout = None
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        layout = self._rows()
        base = self.visual_style.rich_style
        row = layout.row(self.scroll_offset.y + y, self._glyphs)
        if row is None:
            return Strip.blank(layout.width, base)
        if isinstance(row, Strip):
            return row.adjust_cell_length(layout.width, base)
        glyph_row, _ = row
        strip = Strip(glyph_segments(self._glyphs, glyph_row, base))
        return strip.adjust_cell_length(layout.width, base)


class _Layout(NamedTuple):
    width: int
    table: list[Strip]
    header: list[Strip]
    glyph_rows: list[GlyphRow]
    legend: list[Strip]

    @property
    def height(self) -> int:
        # The blank row parts the block table from the pool strip.
        return len(self.table) + 1 + len(self.header) + len(self.glyph_rows) + len(self.legend)

    def row(self, index: int, glyphs: tuple[Glyph, ...]) -> Row:
        """What row `index` shows: a rendered line, a strip row and its glyphs, or None."""
        for section in (self.table, _SEPARATOR, self.header):
            if index < len(section):
                return section[index]
            index -= len(section)
        if index < len(self.glyph_rows):
            glyph_row = self.glyph_rows[index]
            return glyph_row, glyphs[glyph_row.start : glyph_row.end]
        index -= len(self.glyph_rows)
        return self.legend[index] if index < len(self.legend) else None


# An empty strip, not Strip.blank(0): that holds an unstyled segment, which the NO_COLOR
# filter cannot read (it needs a style on every segment).
_SEPARATOR = [Strip([])]
# A row of the map: a rendered line, a strip row with its glyphs, or nothing (past the end).
Row = Strip | tuple[GlyphRow, tuple[Glyph, ...]] | None
