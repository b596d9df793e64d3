"""The roll-back-by-N form for the selected request."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from ..describe import error_message
from ..parsing import parse_int
from .form import FormError, FormInput, dialog_footer

# Called with the token count; returns the removed tokens or raises ValueError/KeyError.
Rollback = Callable[[int], list[int]]


class RollbackScreen(ModalScreen[list[int] | None]):
    """Dismisses with the removed tokens, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, request_id: str, generated: int, rollback: Rollback) -> None:
        super().__init__()
        self._request_id = request_id
        self._generated = generated
        self._rollback = rollback

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form", classes="dialog") as form:
            # Plain Content: a title string is markup, and escape() misses tags such as [B].
            form.border_title = Content(f"Roll back {self._request_id}")
            yield Static(
                f"Remove how many generated tokens? It has {self._generated}; "
                "larger counts stop at zero."
            )
            yield FormInput(value="1", id="count", compact=True)
            yield FormError()
            with Horizontal(classes="buttons"):
                yield Button("Roll back", variant="warning", id="rollback", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
        yield dialog_footer()

    def on_mount(self) -> None:
        count = self.query_one("#count", Input)
        count.focus()
        count.select_all()

    @on(Input.Submitted)
    @on(Button.Pressed, "#rollback")
    def _roll_back(self) -> None:
        try:
            count = parse_int(self.query_one("#count", Input).value, "the count", minimum=1)
            removed = self._rollback(count)
        except (ValueError, KeyError) as error:
            self.query_one(FormError).show(error_message(error))
            return
        self.dismiss(removed)

    @on(Input.Changed)
    def _edited(self) -> None:
        self.query_one(FormError).clear()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
