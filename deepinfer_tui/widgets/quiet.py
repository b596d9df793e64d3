"""Updates that repaint a pane without laying out the whole screen when its size is unchanged.

A screen layout re-measures every widget and refreshes every scroll view's scrollbars, and
those refreshes are painted in a second frame. A keypress that only changes what panes show
(not how tall they are) therefore needs no layout: one frame per keypress.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.widgets import Static


def update_static(widget: Static, content: Text) -> None:
    """Show new content; lay out the screen only if the widget's content height changes."""
    widget.update(content, layout=False)
    width, height = widget.content_size
    lines = content.plain.split("\n")
    if all(cell_len(line) <= width for line in lines):
        measured = len(lines)  # nothing wraps: one row per line, no need to render it to count
    else:
        measured = widget.get_content_height(widget.container_size, widget.app.size, width)
    if not width or measured != height:
        widget.refresh(layout=True)


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
        view.vertical_scrollbar.window_virtual_size = size.height
    if view.scroll_y > view.max_scroll_y:
        view.scroll_to(y=view.max_scroll_y, animate=False)
        repaint = True
    if repaint:
        view.refresh()
