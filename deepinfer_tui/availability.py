"""Which debugger key can act now, and if not, why: a pure policy over a `Situation`.

The app captures a `Situation` (mode, open screens, export and background round, the selected
request, what the session allows) and asks: the footer dims what `availability` says cannot
act now, a dimmed key or palette entry shows `refusal`, and the palette marks entries by it.
No Textual import: the policy is tested on plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .bindings import (
    DEBUGGER_ACTIONS,
    KEYS,
    LIVE_ONLY,
    MUTATING,
    OVER_ANY_SCREEN,
    REPLAY_ONLY,
    Key,
    debugger_actions_of,
)
from .describe import plural

ROW_ACTIONS = frozenset({"cancel_request", "rollback", "rollback_many"})
# Keys a replay moves through frames with that the panes also use (to scroll).
PANE_KEYS = frozenset({"home", "end"})


class SessionState(Protocol):
    """What the policy asks the session (read when needed: a long round may be running)."""

    def can_step(self) -> bool: ...

    def can_undo(self) -> bool: ...


@dataclass(frozen=True)
class ReplayPlace:
    position: int
    frames: int


@dataclass(frozen=True)
class Situation:
    session: SessionState
    tick: int = 0
    undo_depth: int = 0
    replay: ReplayPlace | None = None  # None: a live session
    covered_by: str | None = None  # the screen over the debugger ("the guide"); None: none
    exporting: bool = False
    computing: str | None = None  # the background round, described; None: none runs
    auto_running: bool = False
    selected_id: str | None = None  # the request under the table's cursor
    selected: Mapping[str, Any] | None = None  # its view
    filter_log: bool = False


def in_this_mode(action: str, replaying: bool) -> bool:
    """False for the keys of the other mode: replay stepping live, mutations and auto-run's
    speed in a replay."""
    if action in REPLAY_ONLY:
        return replaying
    if action in MUTATING or action in LIVE_ONLY:
        return not replaying
    return True


def keys_in_this_mode(replaying: bool) -> list[Key]:
    """The keys the help and the palette list: without the other mode's (live vs replay)."""
    return [key for key in KEYS if in_this_mode(key.action, replaying)]


def _covers(action: str, situation: Situation) -> bool:
    """True when another screen owns `action`'s key until it closes."""
    return situation.covered_by is not None and action in DEBUGGER_ACTIONS - OVER_ANY_SCREEN


def availability(action: str, situation: Situation) -> bool | None:
    """True: can act; None: could, but not now (dimmed); False: not here (hidden)."""
    if _covers(action, situation) or not in_this_mode(action, situation.replay is not None):
        return False
    return True if blocker(action, situation) is None else None


def refusal(action: str, situation: Situation) -> str:
    """Why `action` cannot act now, in the user's words: a key and its palette entry give the
    same reason."""
    if _covers(action, situation):
        return f"close {situation.covered_by} first"
    if in_this_mode(action, situation.replay is not None):
        return blocker(action, situation) or "not available right now"
    if situation.replay is not None:
        return "a saved trace is read-only: this key acts in a live session"
    return "this key steps through a saved trace"


def refused_action(key: str, situation: Situation) -> str | None:
    """The action whose refusal a press of `key` shows (None: the key acts, or is not a
    debugger key). A key serving both modes explains the one of this mode."""
    actions = debugger_actions_of(key)
    uncovered = replace(situation, covered_by=None)  # the caller checks the screens
    if not actions or any(availability(action, uncovered) for action in actions):
        return None
    mine = [action for action in actions if in_this_mode(action, situation.replay is not None)]
    if not mine and key in PANE_KEYS:
        return None  # live, the focused pane's own key (it scrolls), not a refused frame key
    return mine[0] if mine else actions[0]


def blocker(action: str, situation: Situation) -> str | None:
    """Why an action of this mode cannot act now (None: it can)."""
    if action in REPLAY_ONLY:
        return _replay_blocker(action, situation.replay)
    if action == "toggle_run" and situation.auto_running:
        return None  # pausing is always possible
    live_goto = action == "goto_round" and situation.replay is None  # it undoes or steps
    if action in MUTATING or action == "export" or live_goto:  # these read or change it
        if situation.exporting:
            return "an export is still being written"
        if situation.computing is not None:
            return situation.computing
    if action in ("step", "toggle_run", "run_until") and not situation.session.can_step():
        return "nothing to step: every request has finished and no scenario event is due"
    if action == "undo" and not situation.session.can_undo():
        return why_no_undo(situation.tick, situation.undo_depth)
    if action == "filter_log":
        selected = situation.selected_id is not None or situation.filter_log
        return None if selected else "select a request first"
    if action in ROW_ACTIONS:
        return _row_blocker(action, situation.selected)
    return None


def _replay_blocker(action: str, replay: ReplayPlace | None) -> str | None:
    assert replay is not None  # in_this_mode: replay keys act in a replay only
    if action in ("frame_forward", "last_frame"):
        return "this is the last frame" if replay.position == replay.frames - 1 else None
    return "this is the first frame" if replay.position == 0 else None


def _row_blocker(action: str, request: Mapping[str, Any] | None) -> str | None:
    if request is None:
        return "select a request first"
    if action == "cancel_request":
        return None if request.get("can_cancel") else f"{request['id']} has already finished"
    if request.get("can_rollback"):
        return None
    ended = {"cancelled": "was cancelled", "error": "failed"}.get(request["finish_reason"])
    if ended:
        return f"{request['id']} {ended}: it cannot be rolled back"
    return f"{request['id']} has no generated tokens to roll back"


def why_no_undo(tick: int, undo_depth: int) -> str:
    if tick == 0:
        return "nothing to undo"
    if undo_depth == 0:
        return "undo is off: this session keeps no rounds to undo (undo depth 0)"
    return (
        f"no older round to undo: undo keeps the last {plural(undo_depth, 'round')} at most, "
        "fewer when the pool needs their blocks"
    )
