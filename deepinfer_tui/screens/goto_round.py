"""The go-to-round form: asks a round number, and dismisses with it."""

from __future__ import annotations

from .number_form import NumberForm


class GotoRoundScreen(NumberForm[int]):
    """Dismisses with the round asked for, or None when cancelled. Whether the debugger can
    reach it is the app's to say (a notification), not the form's."""

    FIELD_ID = "round-number"
    BUTTON = ("Go", "primary")

    def __init__(self, tick: int, reach: str) -> None:
        # `reach`: what the debugger can reach from here, in words.
        question = f"Go to which round? This is round {tick}; {reach}."
        super().__init__("Go to round", question, tick, "the round", minimum=0)
