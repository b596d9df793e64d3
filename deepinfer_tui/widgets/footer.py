"""The key footer, with minor keys tagged so narrow terminals can hide them.

Hidden keys still work and stay listed in help (f1/?) and the command palette (ctrl+p).
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.widgets import Footer


class KeyFooter(Footer):
    def __init__(self, minor_actions: Iterable[str], *, id: str | None = None) -> None:
        super().__init__(compact=True, id=id)
        self._minor = frozenset(minor_actions)

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            # Footer's key widgets carry their binding's action name.
            if getattr(widget, "action", None) in self._minor:
                widget.add_class("-minor")
            yield widget
