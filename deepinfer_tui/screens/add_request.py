"""The add-request form: prompt token ids, max tokens, an optional EOS id, the sampling
settings (temperature, top-k, top-p, seed) and the priority."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ..describe import error_message
from ..request_form import (
    DEFAULT_MAX_TOKENS,
    SAMPLING_FIELDS,
    NewRequest,
    counted_from_one,
    field_id,
    read_request,
    refused_field,
)
from .form import FormError, FormInput, dialog_footer

# Called with the form's request; returns the new request id or raises ValueError.
Submit = Callable[[NewRequest], str]
# The fields' ids, in tab order.
FIELDS = ("prompt", "max-tokens", "eos", *(field_id(k) for k, _, _ in SAMPLING_FIELDS), "priority")


def _field(label: str, name: str, *, value: str = "", placeholder: str = "") -> Vertical:
    """A label over its input (whose id is `name`), half a row wide."""
    field = FormInput(value=value, placeholder=placeholder, id=name, compact=True)
    return Vertical(Label(label), field, classes="field")


class AddRequestScreen(ModalScreen[str | None]):
    """Dismisses with the new request's id, or None when cancelled.

    The submission happens through the callback while the form is open, so an engine refusal
    (token out of vocabulary, pool too small) is shown here and nothing changes.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, submit: Submit, vocab_size: int) -> None:
        super().__init__()
        self._submit = submit
        self._vocab_size = vocab_size

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="form", classes="dialog") as form:
            form.border_title = "Add a request"
            yield Static(
                f"Token ids in [0, {self._vocab_size}), separated by commas or spaces "
                "(token 1 is the first). Requests added here are named user-1, user-2, …, "
                "apart from the scenario's."
            )
            yield Label("Prompt")
            yield FormInput(placeholder="1,2,3", id="prompt", compact=True)
            # Two fields a row, in tab order: the whole form fits an 80x24 screen.
            with Horizontal(classes="field-pair"):
                yield _field("Max new tokens", "max-tokens", value=str(DEFAULT_MAX_TOKENS))
                yield _field("EOS token id (optional)", "eos", placeholder="none")
            yield Static("Sampling and priority: an empty field takes its default.")
            fields = [
                _field(label, field_id(key), placeholder=shown)
                for key, label, shown in SAMPLING_FIELDS
            ]
            fields.append(_field("Priority (smaller: first)", "priority", placeholder="0"))
            for pair in (fields[:2], fields[2:4], fields[4:]):
                with Horizontal(classes="field-pair"):
                    yield from pair
            yield FormError()
            with Horizontal(classes="buttons"):
                yield Button("Add", variant="primary", id="add", compact=True)
                yield Button("Cancel", id="cancel", compact=True)
        yield dialog_footer()

    def on_mount(self) -> None:
        self.query_one("#prompt", Input).focus()

    @property
    def error(self) -> str:
        return str(self.query_one(FormError).content)

    @on(Input.Changed)
    def _edited(self) -> None:
        self.query_one(FormError).clear()

    @on(Input.Submitted)
    @on(Button.Pressed, "#add")
    def _add(self) -> None:
        fields = {name: self.query_one(f"#{name}", Input).value for name in FIELDS}
        try:
            request_id = self._submit(read_request(fields, self._vocab_size))
        except (ValueError, KeyError) as error:
            message = error_message(error)
            refusal = self.query_one(FormError)
            refusal.show(counted_from_one(message))
            refused = refused_field(message)
            if refused is not None:  # to fix it next, the cursor at its end
                field = self.query_one(f"#{refused}", Input)
                field.focus()
                # After focus, which selects all when the cursor comes from another field: a
                # long prompt with one bad token is mended, not lost to one key.
                field.call_after_refresh(field.action_end)
            refusal.scroll_visible(animate=False)  # below the fields: a small screen scrolls
            return
        self.dismiss(request_id)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
