"""The add-request form: prompt token ids, max tokens, an optional EOS id, the sampling
settings (temperature, top-k, top-p, seed) and the priority."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from engine import SamplingParams

from ..describe import error_message
from ..parsing import eos_problem, parse_int, parse_number, parse_optional_int, parse_tokens
from .form import FormError, FormInput, dialog_footer


@dataclass(frozen=True)
class NewRequest:
    """What the form asks for, as the session's submit takes it."""

    prompt: list[int]
    max_tokens: int = 8
    eos_id: int | None = None
    priority: int = 0
    sampling: dict[str, Any] | None = None  # SamplingParams' fields; None: greedy


# Called with the form's request; returns the new request id or raises ValueError.
Submit = Callable[[NewRequest], str]
_ENGINE_INDEX = re.compile(r"\bprompt\[(\d+)\]")


def counted_from_one(message: str) -> str:
    """The form counts tokens from 1 (`token 3`); the engine indexes them (`prompt[2]`)."""
    return _ENGINE_INDEX.sub(lambda match: f"token {int(match[1]) + 1}", message)


# (SamplingParams' field, its label, placeholder); a field's id is its name, hyphenated.
_SAMPLING_FIELDS = (
    ("temperature", "Temperature (0: greedy)", "0"),
    ("top_k", "Top-k (0: every token)", "0"),
    ("top_p", "Top-p, in (0, 1]", "1"),
    ("seed", "Seed", "drawn by the engine"),
)
_DECIMAL_FIELDS = ("temperature", "top_p")


def _field_id(key: str) -> str:
    return key.replace("_", "-")


def _field(label: str, field_id: str, *, value: str = "", placeholder: str = "") -> Vertical:
    """A label over its input, half a row wide."""
    field = FormInput(value=value, placeholder=placeholder, id=field_id, compact=True)
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
                yield _field("Max new tokens", "max-tokens", value="8")
                yield _field("EOS token id (optional)", "eos", placeholder="none")
            yield Static("Sampling and priority: an empty field takes its default.")
            fields = [
                _field(label, _field_id(key), placeholder=shown)
                for key, label, shown in _SAMPLING_FIELDS
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
        try:
            request_id = self._submit(self._read_form())
        except (ValueError, KeyError) as error:
            refusal = self.query_one(FormError)
            refusal.show(counted_from_one(error_message(error)))
            refusal.scroll_visible(animate=False)  # below the fields: a small screen scrolls
            return
        self.dismiss(request_id)

    def _read_form(self) -> NewRequest:
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
        text = self.query_one("#priority", Input).value
        priority = parse_int(text, "priority") if text.strip() else 0
        return NewRequest(prompt, max_tokens, eos_id, priority, self._read_sampling())

    def _read_sampling(self) -> dict[str, Any] | None:
        """The sampling fields given, checked by SamplingParams (None: all empty, greedy)."""
        given: dict[str, Any] = {}
        for key, _, _ in _SAMPLING_FIELDS:
            text = self.query_one(f"#{_field_id(key)}", Input).value
            if not text.strip():
                continue
            parse = parse_number if key in _DECIMAL_FIELDS else parse_int
            given[key] = parse(text, key)
        if not given:
            return None
        return SamplingParams(**given).to_dict()  # its own ValueError names the field

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
