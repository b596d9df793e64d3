"""Updates that repaint a pane without laying out the whole screen when its size is unchanged.

A screen layout re-measures every widget and refreshes every scroll view's scrollbars, and
those refreshes are painted in a second frame. A keypress that only changes what panes show
(not how tall they are) therefore needs no layout: one frame per keypress.

Scrollbars, likewise, are repainted only when they would look different: a log that grows by
hundreds of rows a round moves its scroll range and position every round, while its thumb,
already one cell at the bottom, stays where it is.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

from textual.geometry import Region, Size
from textual.reactive import Reactive
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.widget import Widget


def set_scroll_extent(view: ScrollView, size: Size, *, repaint: bool = True) -> None:
    """Set a fixed-size scroll view's virtual size, updating its scrollbar without a layout.

    Only for views whose box is set by the layout (not by their content) and whose vertical
    scrollbar is always shown or never shown, so no scrollbar can appear or vanish here.
    `repaint=False`: the caller repaints the rows that changed itself (a scroll back into
    range still repaints the whole view).
    """
    if size == view.virtual_size:
        return
    view.set_reactive(ScrollView.virtual_size, size)
    if view.show_vertical_scrollbar:
        set_scrollbar(view.vertical_scrollbar, window_virtual_size=size.height)
    if view.scroll_y > view.max_scroll_y:
        view.scroll_to(y=view.max_scroll_y, animate=False)
        repaint = True
    if repaint:
        view.refresh()


def shows_scrollbar(view: ScrollView, axis: int, overflows: bool) -> bool:
    """Whether the view shows its scrollbar along `axis` (0: x, 1: y) for content that
    overflows it or not: always with overflow `scroll`, never with `hidden`."""
    overflow = view.styles.overflow_x if axis == 0 else view.styles.overflow_y
    return overflow == "scroll" or (overflow == "auto" and overflows)


def extent_keeps_box(view: ScrollView, before: Size, after: Size) -> bool:
    """True if a scroll view's virtual size can go from `before` to `after` without a layout:
    along each axis no scrollbar comes or goes (the content overflows the view both times or
    neither time, or the bar is always or never shown), and the box does not follow the
    content (a box sized by the layout, or an auto-sized one already at its cap because the
    content overflows). A width change must also leave the horizontal scrollbar hidden
    (`set_scroll_extent` keeps only the vertical one up to date).
    """
    room = view.scrollable_content_region.size
    if not view.is_mounted or room.width <= 0 or room.height <= 0:
        return False
    shown = (view.show_horizontal_scrollbar, view.show_vertical_scrollbar)
    for axis, (old, new, space) in enumerate(zip(before, after, room)):
        bars = {shows_scrollbar(view, axis, length > space) for length in (old, new)}
        if bars != {shown[axis]}:
            return False
        length = view.styles.width if axis == 0 else view.styles.height
        follows = length is None or length.is_auto
        if old != new and follows and not (old > space and new > space):
            return False
    return before.width == after.width or not shown[0]


def set_scrollbar(bar: ScrollBar, **values: float) -> None:
    """Set scrollbar reactives (validated, as an assignment would), repainting the bar only
    if it would now be drawn differently (inside `scrollbar_held`: decided when it ends)."""
    before = _HELD[bar] if bar in _HELD else _scrollbar_look(bar)
    for name, value in values.items():
        reactive = getattr(ScrollBar, name)
        assert isinstance(reactive, Reactive)
        validate = getattr(bar, f"validate_{name}", None)
        bar.set_reactive(reactive, validate(value) if validate else value)
    if bar not in _HELD and (before is None or _scrollbar_look(bar) != before):
        bar.refresh()


@contextmanager
def scrollbar_held(bar: ScrollBar | None) -> Iterator[None]:
    """Changes made with `set_scrollbar` inside the block repaint the bar once, at its end,
    and only if the bar then looks different from before the block (a growing log moves
    its range, then its position: each alone would move the thumb, both together do not)."""
    if bar is None or bar in _HELD:
        yield
        return
    _HELD[bar] = before = _scrollbar_look(bar)
    try:
        yield
    finally:
        del _HELD[bar]
        if before is None or _scrollbar_look(bar) != before:
            bar.refresh()


# Bars inside `scrollbar_held`, with how they looked when it began.
_HELD: WeakKeyDictionary[ScrollBar, Hashable | None] = WeakKeyDictionary()


def _scrollbar_look(bar: ScrollBar) -> Hashable | None:
    """What the bar draws: its style and its cells; None if that cannot be told."""
    if not bar.is_mounted or bar.parent is None:
        return None
    renderable = bar.render()
    if type(renderable) is not ScrollBarRender:
        return None
    width, height = bar.size
    size, thickness = (height, width) if renderable.vertical else (width, height)
    cells = ScrollBarRender.render_bar(
        size=size,
        virtual_size=renderable.virtual_size,
        window_size=renderable.window_size,
        position=renderable.position,
        thickness=thickness,
        vertical=renderable.vertical,
    )
    return renderable.style, tuple(cells.segments), cells.new_lines


def refresh_rows(widget: Widget, rows: Iterable[int], width: int) -> None:
    """Repaint these content rows (ascending): one region per run, in one refresh call."""
    regions: list[Region] = []
    for y in rows:
        if regions and regions[-1].bottom == y:
            last = regions[-1]
            regions[-1] = Region(0, last.y, width, last.height + 1)
        else:
            regions.append(Region(0, y, width, 1))
    if regions:  # refresh() with no region repaints everything
        widget.refresh(*regions)


class RefreshesHeld:
    """Mixin for a widget rebuilt in one go: inside `refreshes_held()`, refresh() only records
    whether a repaint or a layout was asked for; the caller decides at the end what to do."""

    _held: list[bool] | None = None  # [repaint, layout] asked for while held

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Any:
        held = self._held
        if held is None or recompose:
            base: Any = super()
            return base.refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        held[0] = held[0] or repaint
        held[1] = held[1] or layout
        return self

    @contextmanager
    def refreshes_held(self) -> Iterator[list[bool]]:
        self._held = wanted = [False, False]
        try:
            yield wanted
        finally:
            self._held = None
