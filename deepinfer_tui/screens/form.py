"""What the dialogs share: a field whose enter key shows in the dialog's footer."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input


class FormInput(Input):
    """An Input whose enter (submit the form) is listed in the footer: Input hides it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "submit", "confirm")]


def dialog_footer() -> Footer:
    """The keys of the dialog on top (docked over the debugger's footer, whose keys would type
    into the field or act behind the dialog)."""
    return Footer(compact=True, show_command_palette=False)
