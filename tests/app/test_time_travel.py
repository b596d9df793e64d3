"""Go to round N (issue 25): live through undo and stepping, in a replay that round's frame;
a round out of reach is a notification and changes nothing."""

from __future__ import annotations

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.screens.goto_round import GotoRoundScreen
from deepinfer_tui.session import Session
from deepinfer_tui.time_travel import FORWARD_LIMIT, frame_of_round, plan, stop_reason
from tests.app.helpers import messages

SIZE = (120, 40)


def test_the_plan_moves_back_through_undo_and_forward_by_steps() -> None:
    assert plan(tick=5, target=2, undo_available=3, can_step=True) == -3
    assert plan(tick=5, target=9, undo_available=0, can_step=True) == 4
    assert plan(tick=5, target=5, undo_available=0, can_step=False) == 0
    with pytest.raises(ValueError, match="undo keeps 2 rounds here \\(back to round 3\\)"):
        plan(tick=5, target=2, undo_available=2, can_step=True)
    with pytest.raises(ValueError, match="every request has finished"):
        plan(tick=5, target=6, undo_available=5, can_step=False)
    with pytest.raises(ValueError, match=f"at most {FORWARD_LIMIT}"):
        plan(tick=0, target=FORWARD_LIMIT + 1, undo_available=0, can_step=True)


def test_a_replay_goes_to_the_first_frame_of_the_round() -> None:
    snapshots = [{"tick": 0}, {"tick": 1}, {"tick": 1}, {"tick": 2}]
    assert frame_of_round(snapshots, 1) == 1 and frame_of_round(snapshots, 2) == 3
    with pytest.raises(ValueError, match="rounds 0 to 2"):
        frame_of_round(snapshots, 3)


async def go_to(pilot, round_: int) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("G")
    assert isinstance(pilot.app.screen, GotoRoundScreen)
    await pilot.press(*str(round_), "enter")  # the field starts selected: typing replaces it
    await pilot.pause()


async def test_live_go_to_steps_forward_and_undoes_back_to_the_same_state() -> None:
    app = DebuggerApp(Session(default_scenario()))
    reference = Session(default_scenario())
    reference.step()
    reference.step()
    async with app.run_test(size=SIZE) as pilot:
        await go_to(pilot, 4)
        assert app.engine.tick == 4
        await go_to(pilot, 2)
        assert app.engine.tick == 2
        assert app.session.snapshot()["requests"] == reference.snapshot()["requests"]
        assert any("undid 2 rounds" in message for message in messages(app))


async def test_a_round_out_of_reach_is_a_notification_and_nothing_changes() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(undo_depth=1)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space")
        before = app.session.snapshot()["requests"]
        await go_to(pilot, 0)
        assert app.engine.tick == 3 and app.session.snapshot()["requests"] == before
        assert any("round 0 is out of reach" in message for message in messages(app))
        await pilot.press("G", "x", "enter")  # not a number: the form says so, stays open
        assert isinstance(app.screen, GotoRoundScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, GotoRoundScreen) and app.engine.tick == 3


async def test_a_replay_goes_to_that_rounds_frame() -> None:
    recorded = Session(default_scenario())
    for _ in range(4):
        recorded.step()
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await go_to(pilot, 3)
        assert replay.position == 3 and app.view.tick == 3
        await go_to(pilot, 1)
        assert replay.position == 1 and app.view.tick == 1  # and back
        await go_to(pilot, 9)
        assert replay.position == 1
        assert any("round 9 is not in this trace" in message for message in messages(app))


STOP_KINDS = {"preempt", "evict", "block_evicted", "finished"}


def stops(events: list) -> bool:
    """The rounds "run until" must stop at, by the issue's words."""
    return any(
        e["kind"] in STOP_KINDS or (e["kind"] == "commit" and e["outcome"] == "replacement")
        for e in events
    )


def test_stop_reasons_name_the_request() -> None:
    commit = {"kind": "commit", "request_id": "a", "outcome": "replacement"}
    assert stop_reason([commit]) == "a had a draft rejected"
    preempt = {"kind": "preempt", "request_id": "b", "lost_positions": 3}
    assert stop_reason([{"kind": "schedule", "request_id": None}, preempt]) == "b was preempted"
    assert stop_reason([{**commit, "outcome": "bonus"}]) is None


async def test_run_until_stops_at_the_first_notable_round() -> None:
    scenario = default_scenario().with_overrides(token_budget=4, num_blocks=10, block_size=2)
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            start = app.engine.tick
            await pilot.press("R")
            await pilot.pause()
            trace = app.engine.trace
            by_round = {
                t: [e for e in trace if e["tick"] == t]
                for t in range(start + 1, app.engine.tick + 1)
            }
            assert app.engine.tick > start and stops(by_round[app.engine.tick])
            assert not any(stops(by_round[t]) for t in range(start + 1, app.engine.tick))
            assert any(
                message.startswith(f"round {app.engine.tick}: ") for message in messages(app)
            )
