"""One line of Rich text as a strip, drawn from Rich's own segments.

Textual's Content conversion costs ~150 us a line; a line that fits its pane needs none of it
(no wrapping, no justification), and Rich's segments draw the same cells in ~20 us.
"""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip


def fitting_line(console: Console, text: Text, width: int, base: Style) -> list[Strip] | None:
    """The text as one strip `width` cells wide on `base`; None if it does not fit on one
    line as it is (a line to wrap, or justified text: Textual's job). A text that fits needs
    no overflow rule, so one set for a narrower width changes nothing."""
    if "\n" in text.plain or text.cell_len > width or text.justify:
        return None
    # Rich leaves a text's own style out of its segments when it has no spans.
    under = base + console.get_style(text.style) if text.style else base
    segments = Segment.apply_style(text.render(console, end=""), under)
    return [Strip(segments).adjust_cell_length(width, base).simplify()]


def wrapped_lines(console: Console, text: Text, width: int, base: Style) -> list[Strip] | None:
    """A single-line text too long for `width`, word-wrapped (long words folded) by Rich,
    one strip a line; None where Textual must do it (several lines, justified text)."""
    if "\n" in text.plain or text.justify or width <= 0:
        return None
    strips: list[Strip] = []
    for line in text.wrap(console, width, justify="left", overflow="fold"):
        line.rstrip()
        fitted = fitting_line(console, line, width, base)
        if fitted is None:
            return None
        strips += fitted
    return strips
