"""The go-to-round form: asks a round number, and dismisses with it."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from ..describe import error_message
from ..parsing import parse_int
from .form import FormError, FormInput, dialog_footer


class GotoRoundScreen(ModalScreen[int | None]):
    """Dismisses with the round asked for, or None when cancelled. Whether the debugger can
    reach it is the app's to say (a notification), not the form's."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, tick: int, reach: str) -> None:
        super().__init__()
        self._tick = tick
        self._reach = reach  # what the debugger can reach from here, in words

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form", classes="dialog") as form:
            form.border_title = "Go to round"
            yield Static(f"Go to which round? This is round {self._tick}; {self._reach}.")
            yield FormInput(value=str(self._tick), id="round-number", compact=True)
            yield FormError()
            with Horizontal(classes="buttons"):
                yield Button("Go", variant="primary", id="go", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
        yield dialog_footer()

    def on_mount(self) -> None:
        field = self.query_one("#round-number", Input)
        field.focus()
        field.select_all()

    @on(Input.Submitted)
    @on(Button.Pressed, "#go")
    def _go(self) -> None:
        try:
            target = parse_int(self.query_one("#round-number", Input).value, "the round", minimum=0)
        except ValueError as error:
            self.query_one(FormError).show(error_message(error))
            return
        self.dismiss(target)

    @on(Input.Changed)
    def _edited(self) -> None:
        self.query_one(FormError).clear()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
