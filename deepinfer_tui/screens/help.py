"""The help screen: every key, what each pane shows, and the colour/symbol legend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..columns import COLUMNS
from ..legend import full_legend
from .form import dialog_footer


@dataclass(frozen=True)
class KeyHelp:
    keys: str
    description: str
    detail: str


PANES = (
    ("Header", "tick, clock, request counts, block pool, acceptance, tokens per round (sparkline)"),
    ("Requests", "one row per request; the cursor row is what the other panes show"),
    ("KV blocks", "the selected request's block table ([slots] = token ids), then the whole pool"),
    (
        "Draft tree",
        "the selected request's last round: proposals, verdicts, the target's extra token",
    ),
    (
        "View area",
        "beside the block map, one view at a time: 1 draft tree, 2 prefix cache, 3 timeline, "
        "4 round budget, 5 metrics, 6 round diff (what changed since the frame before)",
    ),
    (
        "Commit log",
        "every engine event, newest last; f shows only the selected request (and the "
        "evictions behind its cold restore), k one kind of event. A line starts with its "
        "round (t4 = tick 4); times are clock seconds (until 3s). Scrolled up, it stays put "
        "until you scroll back to the bottom",
    ),
)


def _grid(*styles: str) -> Table:
    """Columns side by side, one per style; only the last wraps, under its own start (a
    hanging indent on narrow terminals)."""
    table = Table.grid(padding=(0, 2), pad_edge=True)
    for style in styles[:-1]:
        table.add_column(style=style, no_wrap=True)
    table.add_column(style=styles[-1])
    return table


def key_table(keys: Sequence[KeyHelp]) -> Table:
    """Aligned rows of key, short name and what it does."""
    table = _grid("bold", "", "bright_black")
    for row in keys:
        table.add_row(Text(row.keys), Text(row.description), Text(row.detail))  # no markup
    return table


def panes_table() -> Group:
    table = _grid("bold", "")
    for name, shows in PANES:
        table.add_row(Text(name), Text(shows))  # no markup: [slots] is text
    return Group(Text("Panes", style="bold underline"), table)


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
            body.border_subtitle = "esc / q / ? / f1 close · g guide"
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
            yield Static(panes_table(), id="help-panes")
            columns = {column.header: column.meaning for column in COLUMNS}
            yield Static(full_legend((("Request table", columns),)), id="help-legend")
        yield dialog_footer()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_guide(self) -> None:
        self.dismiss("guide")
