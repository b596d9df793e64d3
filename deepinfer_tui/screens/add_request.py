"""The add-request form: prompt token ids, max tokens and an optional EOS id."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from ..describe import error_message
from ..parsing import eos_problem, parse_int, parse_optional_int, parse_tokens
from .form import FormError, FormInput, dialog_footer

# Called with (prompt, max_tokens, eos_id); returns the new request id or raises ValueError.
Submit = Callable[[list[int], int, int | None], str]
_ENGINE_INDEX = re.compile(r"\bprompt\[(\d+)\]")


def counted_from_one(message: str) -> str:
    """The form counts tokens from 1 (`token 3`); the engine indexes them (`prompt[2]`)."""
    return _ENGINE_INDEX.sub(lambda match: f"token {int(match[1]) + 1}", message)


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
            yield Label("Max new tokens")
            yield FormInput(value="8", id="max-tokens", compact=True)
            yield Label("EOS token id (optional)")
            yield FormInput(placeholder="none", id="eos", compact=True)
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
        try:
            request_id = self._submit(*self._read_form())
        except (ValueError, KeyError) as error:
            self.query_one(FormError).show(counted_from_one(error_message(error)))
            return
        self.dismiss(request_id)

    def _read_form(self) -> tuple[list[int], int, int | None]:
        """The fields as the engine takes them; a ValueError in the form's own words."""
        try:
            prompt = parse_tokens(self.query_one("#prompt", Input).value)
        except ValueError as error:
            raise ValueError(f"prompt: {error}") from None
        text = self.query_one("#max-tokens", Input).value
        # An empty field takes the default, as a scenario's submit does.
        max_tokens = parse_int(text, "max new tokens", minimum=0) if text.strip() else 8
        eos_id = parse_optional_int(self.query_one("#eos", Input).value, "EOS token id")
        problem = eos_problem(eos_id, self._vocab_size)
        if problem:
            raise ValueError(problem)
        return prompt, max_tokens, eos_id

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
