"""The roll-back-by-N form for the selected request."""

from __future__ import annotations

from collections.abc import Callable

from .number_form import NumberForm

# Called with the token count; returns the removed tokens or raises ValueError/KeyError.
Rollback = Callable[[int], list[int]]


class RollbackScreen(NumberForm[list[int]]):
    """Dismisses with the removed tokens, or None when cancelled."""

    FIELD_ID = "count"
    BUTTON = ("Roll back", "warning")

    def __init__(self, request_id: str, generated: int, rollback: Rollback) -> None:
        question = (
            f"Remove how many generated tokens? It has {generated}; larger counts stop at zero."
        )
        super().__init__(f"Roll back {request_id}", question, 1, "the count", minimum=1)
        self._rollback = rollback

    def act(self, number: int) -> list[int]:
        return self._rollback(number)
