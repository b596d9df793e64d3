"""The help screen: every key, what each pane shows, and the colour/symbol legend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..legend import full_legend
from .form import dialog_footer


@dataclass(frozen=True)
class KeyHelp:
    keys: str
    description: str
    detail: str


PANES = Text.assemble(
    ("Panes\n", "bold underline"),
    ("  Header      ", "bold"),
    "tick, clock, request counts, block pool, acceptance, tokens per round (sparkline)\n",
    ("  Requests    ", "bold"),
    "one row per request; the cursor row is what the other panes show\n",
    ("  KV blocks   ", "bold"),
    "the selected request's block table ([slots] = token ids), then the whole pool\n",
    ("  Draft tree  ", "bold"),
    "the selected request's last round: proposals, verdicts, the target's extra token\n",
    ("  Commit log  ", "bold"),
    "every engine event, newest last; f shows only the selected request\n",
    ("              ", "bold"),
    "a line starts with its round (t4 = tick 4); times are clock seconds (until 3s)\n",
)


def key_table(keys: Sequence[KeyHelp]) -> Text:
    """Aligned rows of key, short name and what it does (plain text so it reads anywhere)."""
    key_width = max((len(row.keys) for row in keys), default=0)
    name_width = max((len(row.description) for row in keys), default=0)
    text = Text()
    for row in keys:
        text.append(f"  {row.keys:<{key_width}}  ", style="bold")
        text.append(f"{row.description:<{name_width}}  ")
        text.append(f"{row.detail}\n", style="bright_black")
    text.rstrip()
    return text


class HelpScreen(ModalScreen[str | None]):
    """Dismisses with "guide" when `g` asks for the guide (the app opens it), else None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f1,question_mark", "close", "close"),
        Binding("g", "guide", "guide"),
    ]

    def __init__(self, keys: Sequence[KeyHelp]) -> None:
        super().__init__()
        self._keys = tuple(keys)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help", classes="dialog") as body:
            body.border_title = "Help · deepinfer-tui"
            body.border_subtitle = "escape / q / ? closes"
            yield Static(Text("Keys", style="bold underline"))
            yield Static(key_table(self._keys), id="help-keys")
            yield Static(
                Text.assemble(
                    "Press ",
                    ("g", "bold"),
                    " for the guide: chapters that walk through what each pane shows. "
                    "ctrl+p opens the command palette with every action.",
                ),
                id="help-guide",
            )
            yield Static(PANES, id="help-panes")
            yield Static(full_legend(), id="help-legend")
        yield dialog_footer()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_guide(self) -> None:
        self.dismiss("guide")
