"""A widget's Rich style, looked up once per repaint instead of once per line.

`Widget.rich_style` walks every ancestor's styles each time it is read, and Textual's line
widgets (Tree) read it for every line they draw. Within one `render_lines` call the
style cannot change, so the mixin reads it once and serves that value until the call returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip


class StyleOncePerRepaint:
    """Mixin for line widgets: put it before the Textual widget class in the bases.

    A plain class, not a Widget: a Widget subclass in the bases would reset inherited class
    settings such as `can_focus`.
    """

    _repaint_style: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        with self.style_held():
            lines: list[Strip] = super().render_lines(crop)  # type: ignore[misc]
            return lines

    @contextmanager
    def style_held(self) -> Iterator[None]:
        """Read the style once for a block that draws lines and changes no styles."""
        self._repaint_style = None
        self._repaint_style = self.rich_style
        try:
            yield
        finally:
            self._repaint_style = None

    @property
    def rich_style(self) -> Style:
        style = self._repaint_style
        if style is None:
            base: Any = super()
            return base.rich_style  # type: ignore[no-any-return]
        return style
