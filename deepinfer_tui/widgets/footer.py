"""The key footer, with minor keys tagged so narrow terminals can hide them.

Hidden keys still work and stay listed in help (f1/?) and the command palette (ctrl+p).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from textual.app import ComposeResult
from textual.widgets import Footer


class KeyFooter(Footer):
    def __init__(self, tiers: Mapping[str, Iterable[str]], *, id: str | None = None) -> None:
        """`tiers`: a CSS class per set of actions, for the stylesheet to hide by width."""
        super().__init__(compact=True, id=id)
        self._tiers = {name: frozenset(actions) for name, actions in tiers.items()}

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            # Footer's key widgets carry their binding's action name.
            action = getattr(widget, "action", None)
            for name, actions in self._tiers.items():
                if action in actions:
                    widget.add_class(name)
            yield widget
