"""The key footer, with minor keys tagged so narrow terminals can hide them, and the Textual
binding of each key of the table (`bindings.KEYS`): the view keys share a group, shown side by
side under one word.

Hidden keys still work and stay listed in help (f1/?) and the command palette (ctrl+p).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from ..bindings import Key


def binding_of(key: Key) -> Binding:
    """The Textual binding of one key of the table."""
    return Binding(
        key.keys,
        key.action,
        key.description,
        tooltip=key.tooltip,
        id=key.action,
        show=key.show,
        priority=key.priority,
        group=None if key.group is None else _group(key.group),
    )


@cache
def _group(name: str) -> Binding.Group:
    """One footer group per name: the footer puts its keys side by side under the name."""
    return Binding.Group(name, compact=True)


class KeyFooter(Footer):
    def __init__(self, tiers: Mapping[str, Iterable[str]], *, id: str | None = None) -> None:
        """`tiers`: a CSS class per set of actions, for the stylesheet to hide by width."""
        super().__init__(compact=True, id=id)
        self._tiers = {name: frozenset(actions) for name, actions in tiers.items()}
        self._keys_shown: tuple[tuple[str, str, str, str], ...] | None = None

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._keys_shown = tuple(_keys_shown(self.screen))
        for widget in super().compose():
            # Footer's key widgets carry their binding's action name.
            action = getattr(widget, "action", None)
            for name, actions in self._tiers.items():
                if action in actions:
                    widget.add_class(name)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        """When only keys' availability changed, dim or undim them in place: a recompose
        rebuilds every key and lays the screen out again (a frame or two per keypress)."""
        if (
            self._bindings_ready
            and screen.app.app_focus
            and self.is_attached
            and screen is self.screen
            and self._keys_shown == tuple(_keys_shown(screen))
        ):
            enabled: dict[str, bool] = {}
            for _, binding, on, _ in screen.active_bindings.values():
                enabled.setdefault(binding.action, on)  # as compose: an action's first binding
            for key in self.query(FooterKey):
                disabled = not enabled.get(key.action, True)
                if key._disabled != disabled:  # what Footer's compose sets, class and flag
                    key._disabled = disabled
                    key.set_class(disabled, "-disabled")
            return
        super().bindings_changed(screen)


def _keys_shown(screen: Screen) -> list[tuple[str, str, str, str]]:
    """What the footer draws apart from availability: each shown key, its words and tooltip."""
    return [
        (binding.action, binding.key, binding.description, tooltip or "")
        for _, binding, _, tooltip in screen.active_bindings.values()
        if binding.show
    ]
