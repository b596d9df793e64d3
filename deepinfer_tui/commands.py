"""Command palette (ctrl+p): every debugger action, searchable, with its key and whether it can
act right now."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from textual.await_complete import AwaitComplete
from textual.command import CommandPalette, DiscoveryHit, Hit, Hits, Provider
from textual.content import Content


@dataclass(frozen=True)
class PaletteAction:
    action: str
    title: str
    keys: str
    detail: str


class PaletteHost(Protocol):
    """What the provider needs from the app (kept narrow so this module stays decoupled)."""

    def palette_actions(self) -> Sequence[PaletteAction]: ...

    def action_available(self, action: str) -> bool: ...

    def run_palette_action(self, action: str) -> None: ...


class DebuggerCommands(Provider):
    """Lists the app's actions; unavailable ones say so and explain instead of acting."""

    def _host(self) -> PaletteHost | None:
        app = self.app
        if hasattr(app, "palette_actions") and hasattr(app, "run_palette_action"):
            return app  # type: ignore[return-value]
        return None

    def _entries(self) -> list[tuple[str, str, Callable[[], None]]]:
        """(text, help, run) per action; none when the app is not the debugger."""
        host = self._host()
        if host is None:
            return []
        entries: list[tuple[str, str, Callable[[], None]]] = []
        for entry in host.palette_actions():
            state = "" if host.action_available(entry.action) else " (not available now)"
            text = f"{entry.title} [{entry.keys}]{state}"
            entries.append((text, entry.detail, partial(host.run_palette_action, entry.action)))
        return entries

    # The palette reads a string hit as markup, which ate keys like [b] and [space n] as tags:
    # each hit's text is plain Content instead.
    async def discover(self) -> Hits:
        for text, detail, run in self._entries():
            yield DiscoveryHit(Content(text), run, text=text, help=_literal(detail))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, detail, run in self._entries():
            score = max(matcher.match(text), matcher.match(detail) * 0.5)
            if score > 0:
                shown = Content(text)
                _, offsets = matcher.fuzzy_search.match(matcher.query, text)
                for offset in (o for o in offsets if not text[o].isspace()):
                    shown = shown.stylize(matcher.match_style, offset, offset + 1)
                yield Hit(score, shown, run, text=text, help=_literal(detail))


def _literal(text: str) -> str:
    """`text` as markup that shows it unchanged (the help line is read as markup; Textual's
    escape() leaves tags such as [B] alone)."""
    return text.replace("[", "\\[")


class ClosingOncePalette(CommandPalette):
    """Textual's command palette, dismissed once: Enter pressed twice before it closed asked
    it to close twice, and the second pop of the screen stack crashed the app."""

    def dismiss(self, result: None = None) -> AwaitComplete:
        if not self.is_current:
            return AwaitComplete()  # already closing
        return super().dismiss(result)
