"""What the dialogs share: a field whose enter key shows in the dialog's footer, and the line
that says why the form was refused."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static


class FormInput(Input):
    """An Input whose enter (submit the form) is listed in the footer: Input hides it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "submit", "confirm")]


class FormError(Static):
    """Why the form was refused; cleared as soon as a field changes, since the edit may have
    fixed it."""

    def __init__(self) -> None:
        super().__init__("", id="form-error", classes="form-error")

    def show(self, message: str) -> None:
        self.update(f"✗ {message}")
        self.app.bell()

    def clear(self) -> None:
        self.update("")


def dialog_footer() -> Footer:
    """The keys of the dialog on top (docked over the debugger's footer, whose keys would type
    into the field or act behind the dialog)."""
    return Footer(compact=True, show_command_palette=False)
