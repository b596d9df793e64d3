"""A form that asks one whole number and acts on it: the shared shape of the roll-back-by-N
and go-to-round dialogs. A subclass says what it asks and what the number does."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

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

Result = TypeVar("Result")


class NumberForm(ModalScreen[Result | None], Generic[Result]):
    """Dismisses with `act(number)`, or None when cancelled; a number `act` refuses (ValueError
    or KeyError) is shown under the field and the form stays open."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    FIELD_ID = "number"
    BUTTON = ("OK", "primary")  # label, variant

    def __init__(self, title: str, question: str, initial: int, name: str, minimum: int) -> None:
        super().__init__()
        self._title, self._question, self._initial = title, question, initial
        self._name, self._minimum = name, minimum  # how errors name the number; its least value

    def act(self, number: int) -> Any:
        return number

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form", classes="dialog") as form:
            # Plain Content: a title string is markup, and escape() misses tags such as [B].
            form.border_title = Content(self._title)
            yield Static(self._question)
            yield FormInput(value=str(self._initial), id=self.FIELD_ID, compact=True)
            yield FormError()
            label, variant = self.BUTTON
            with Horizontal(classes="buttons"):
                yield Button(label, variant=variant, id="ok", compact=True)  # type: ignore[arg-type]
                yield Button("Cancel", id="cancel", compact=True)
        yield dialog_footer()

    def on_mount(self) -> None:
        field = self.query_one(f"#{self.FIELD_ID}", Input)
        field.focus()
        field.select_all()

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def _submit(self) -> None:
        text = self.query_one(f"#{self.FIELD_ID}", Input).value
        try:
            result = self.act(parse_int(text, self._name, minimum=self._minimum))
        except (ValueError, KeyError) as error:
            self.query_one(FormError).show(error_message(error))
            return
        self.dismiss(result)

    @on(Input.Changed)
    def _edited(self) -> None:
        self.query_one(FormError).clear()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
