"""The availability policy on plain values: which debugger key can act now, and why not."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from deepinfer_tui.availability import (
    ReplayPlace,
    Situation,
    availability,
    blocker,
    in_this_mode,
    refusal,
    refused_action,
    why_no_undo,
)
from deepinfer_tui.bindings import DEBUGGER_ACTIONS, KEYS, MUTATING, REPLAY_ONLY


@dataclass
class FakeSession:
    steppable: bool = True
    undoable: bool = True

    def can_step(self) -> bool:
        return self.steppable

    def can_undo(self) -> bool:
        return self.undoable


def request(**fields: Any) -> dict[str, Any]:
    return {
        "id": "request-1",
        "can_cancel": True,
        "can_rollback": True,
        "finish_reason": None,
        **fields,
    }


def live(**fields: Any) -> Situation:
    fields.setdefault("session", FakeSession())
    return Situation(**fields)


def replaying(position: int, frames: int = 5, **fields: Any) -> Situation:
    return live(replay=ReplayPlace(position, frames), **fields)


SELECTED = {"selected_id": "request-1", "selected": request()}


def test_each_mode_hides_the_other_modes_keys() -> None:
    for action in MUTATING:
        assert availability(action, live(**SELECTED)) is True
        assert availability(action, replaying(2, **SELECTED)) is False
    for action in REPLAY_ONLY:
        assert availability(action, live()) is False
        assert availability(action, replaying(2)) is True
    assert in_this_mode("export", True) and in_this_mode("export", False)


def test_replay_stepping_stops_at_either_end_and_says_so() -> None:
    assert availability("frame_back", replaying(0)) is None
    assert blocker("frame_back", replaying(0)) == "this is the first frame"
    assert availability("frame_forward", replaying(4)) is None
    assert blocker("frame_forward", replaying(4)) == "this is the last frame"
    assert blocker("frame_forward", replaying(3)) is None


def test_a_covering_screen_owns_every_debugger_key_but_the_screenshot() -> None:
    covered = live(covered_by="the guide", **SELECTED)
    for action in DEBUGGER_ACTIONS - {"save_screen"}:
        assert availability(action, covered) is False
        assert refusal(action, covered) == "close the guide first"
    assert availability("save_screen", covered) is True
    assert availability("quit", covered) is True  # not a debugger key: Textual's to route


def test_an_export_or_a_background_round_holds_what_reads_the_session() -> None:
    exporting = live(exporting=True, **SELECTED)
    computing = live(computing="round 3 is still being computed (5,000 positions)", **SELECTED)
    for action in [*MUTATING, "export"]:
        assert blocker(action, exporting) == "an export is still being written"
        assert blocker(action, computing) == "round 3 is still being computed (5,000 positions)"
    assert blocker("filter_log", exporting) is None
    assert blocker("save_screen", computing) is None


def test_auto_run_can_always_be_paused() -> None:
    running = live(auto_running=True, exporting=True, session=FakeSession(steppable=False))
    assert blocker("toggle_run", running) is None
    assert blocker("step", running) == "an export is still being written"


def test_a_finished_session_has_nothing_to_step() -> None:
    done = live(session=FakeSession(steppable=False))
    reason = "nothing to step: every request has finished and no scenario event is due"
    assert blocker("step", done) == reason and blocker("toggle_run", done) == reason
    assert availability("step", done) is None


@pytest.mark.parametrize(
    ("tick", "depth", "reason"),
    [
        (0, 4, "nothing to undo"),
        (3, 0, "undo is off: this session keeps no rounds to undo (undo depth 0)"),
        (
            9,
            1,
            "no older round to undo: undo keeps the last 1 round at most, "
            "fewer when the pool needs their blocks",
        ),
        (
            9,
            4,
            "no older round to undo: undo keeps the last 4 rounds at most, "
            "fewer when the pool needs their blocks",
        ),
    ],
)
def test_undo_says_why_there_is_no_round_to_undo(tick: int, depth: int, reason: str) -> None:
    situation = live(tick=tick, undo_depth=depth, session=FakeSession(undoable=False))
    assert blocker("undo", situation) == reason == why_no_undo(tick, depth)
    assert blocker("undo", live(tick=tick, undo_depth=depth)) is None


def test_filtering_the_log_needs_a_selection_unless_it_is_filtered_already() -> None:
    assert blocker("filter_log", live()) == "select a request first"
    assert blocker("filter_log", live(filter_log=True)) is None
    assert blocker("filter_log", live(selected_id="request-4")) is None


@pytest.mark.parametrize(
    ("fields", "cancel", "rollback"),
    [
        ({"can_cancel": False, "can_rollback": False, "finish_reason": "length"},
         "request-1 has already finished",
         "request-1 has no generated tokens to roll back"),
        ({"can_cancel": False, "can_rollback": False, "finish_reason": "cancelled"},
         "request-1 has already finished",
         "request-1 was cancelled: it cannot be rolled back"),
        ({"can_cancel": False, "can_rollback": False, "finish_reason": "error"},
         "request-1 has already finished",
         "request-1 failed: it cannot be rolled back"),
        ({"can_rollback": False}, None, "request-1 has no generated tokens to roll back"),
        ({}, None, None),
    ],
)  # fmt: skip
def test_row_actions_say_what_the_selected_request_allows(
    fields: dict[str, Any], cancel: str | None, rollback: str | None
) -> None:
    situation = live(selected_id="request-1", selected=request(**fields))
    assert blocker("cancel_request", situation) == cancel
    assert blocker("rollback", situation) == rollback
    assert blocker("rollback_many", situation) == rollback
    for action in ("cancel_request", "rollback", "rollback_many"):
        assert blocker(action, live()) == "select a request first"


def test_the_other_modes_keys_say_which_mode_they_belong_to() -> None:
    assert refusal("undo", replaying(2)) == (
        "a saved trace is read-only: this key acts in a live session"
    )
    assert refusal("frame_back", live()) == "this key steps through a saved trace"
    assert refusal("export", live(exporting=True)) == "an export is still being written"
    assert refusal("export", live()) == "not available right now"


def test_a_key_of_both_modes_explains_the_one_of_this_mode() -> None:
    # `u` is undo live and back in a replay; space steps live and goes forward in a replay.
    assert refused_action("u", live(session=FakeSession(undoable=False))) == "undo"
    assert refused_action("u", replaying(0)) == "frame_back"
    assert refused_action("space", replaying(4)) == "frame_forward"
    assert refused_action("space", replaying(2)) is None  # it acts
    assert refused_action("c", replaying(2)) == "cancel_request"  # live only: says so
    assert refused_action("q", live()) is None  # not a debugger key
    assert refused_action("x", live()) is None  # no key at all


def test_a_refused_key_ignores_the_screens_the_app_checks_itself() -> None:
    # The app routes keys under a dialog to the dialog; the policy answers for the debugger.
    covered = live(covered_by="the help", session=FakeSession(steppable=False))
    assert refused_action("n", covered) == "step"


def test_every_debugger_action_has_a_key() -> None:
    assert {key.action for key in KEYS} >= DEBUGGER_ACTIONS


@pytest.mark.parametrize("module", ["deepinfer_tui.availability", "deepinfer_tui.bindings"])
def test_the_policy_loads_no_textual(module: str) -> None:
    code = f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'textual'" not in out.stdout and "'deepinfer_tui'" in out.stdout
