"""What `u` says it undid: the round, what was done after it (which goes too), and whether
auto-run was paused so that its next tick does not run the undone round again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .describe import plural


def describe_operation(operation: Mapping[str, Any]) -> str:
    """One recorded session operation, in the user's words."""
    kind = operation.get("op")
    if kind == "submit":
        return f"{operation.get('request_id', 'a new request')}'s submission"
    if kind == "cancel":
        return f"cancelling {operation.get('id')}"
    if kind == "rollback":
        asked = operation.get("tokens", 1)
        removed = operation.get("removed", asked)
        said = f"rolling {operation.get('id')} back {plural(removed, 'token')}"
        return said if removed == asked else f"{said} (asked for {asked})"
    if kind == "clock":
        return f"the clock move of {float(operation.get('seconds', 0)):g}s"
    return str(kind)


def undo_notice(
    undone_round: int, discarded: Sequence[Mapping[str, Any]], paused_auto_run: bool
) -> str | None:
    """The notice after undoing `undone_round`; None when a bare round went (nothing to say)."""
    if not discarded and not paused_auto_run:
        return None
    said = [f"Undid round {undone_round}"]
    if discarded:
        what = ", ".join(describe_operation(op) for op in discarded)
        said.append(f" and what was done after it: {what}")
    if paused_auto_run:
        said.append(". Auto-run paused: press r to run on")
    return "".join(said)
