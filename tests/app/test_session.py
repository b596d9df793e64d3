"""Session: the Textual-free core the app and the CLI act through."""

from collections.abc import Callable

import pytest

from deepinfer_tui.log_view import log_still_holds
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets.status import CommitTally
from deepinfer_tui.widgets.view import View
from engine import Engine, greedy_generate


def test_user_submit_never_takes_an_id_a_scenario_event_will_use() -> None:
    session = Session(default_scenario())
    session.step()
    session.step()
    added = session.submit([1, 2, 3], 4)
    session.run()
    scenario_ids = {e.submit["id"] for e in session.scenario.events if e.submit}
    assert added not in scenario_ids
    assert scenario_ids | {added} == set(session.engine.requests)
    result = session.engine.result(added)
    assert result.tokens == greedy_generate(session.engine.target, [1, 2, 3], max_tokens=4).tokens


def test_undo_depth_from_the_settings_bounds_how_far_undo_goes() -> None:
    session = Session(default_scenario().with_overrides(undo_depth=2))
    for _ in range(3):
        session.step()
    session.undo()
    session.undo()
    assert session.engine.tick == 1 and not session.can_undo()
    before = session.engine.snapshot()
    with pytest.raises(ValueError, match="undo"):
        session.undo()
    assert session.engine.snapshot() == before


def test_undo_rewinds_scenario_events_and_clock_with_the_engine() -> None:
    session = Session(default_scenario())
    while session.engine.tick < 4:
        session.step()
    before = (session.next_event, session.clock.now, session.engine.snapshot())
    events = session.step()
    session.undo()
    assert (session.next_event, session.clock.now, session.engine.snapshot()) == before
    assert session.step() == events


def test_replaying_the_operations_log_reproduces_the_session() -> None:
    session = Session(default_scenario())
    session.step()
    session.advance_clock(0.5)
    session.step()
    session.rollback("request-1", 1)
    session.step()
    session.undo()
    session.cancel("request-2")
    session.run()
    again = Session(default_scenario())
    for operation in session.operations:
        again.apply(operation)
    assert again.engine.trace == session.engine.trace
    assert again.engine.snapshot() == session.engine.snapshot()


def test_bad_operations_raise_and_change_nothing() -> None:
    session = Session(default_scenario())
    session.step()
    before = session.engine.snapshot()
    with pytest.raises(ValueError, match="forward"):
        session.advance_clock(-1)
    with pytest.raises(KeyError, match="nope"):
        session.cancel("nope")
    with pytest.raises(ValueError, match="unknown operation"):
        session.apply({"op": "explode"})
    assert session.engine.snapshot() == before


def test_log_view_matches_the_full_log_through_steps_undo_and_clock_moves() -> None:
    session = Session(default_scenario())
    views = []
    for action in ["step", "step", "clock", "step", "undo", "step", "undo", "undo", "step"]:
        if action == "step":
            session.step()
        elif action == "undo":
            session.undo()
        else:
            session.advance_clock(1.0)
        view = session.log_view()
        assert list(view) == session.log()
        views.append((view, session.log()))
    # Earlier views are immutable: later appends or rewinds never change what they show.
    for view, expected in views:
        assert list(view) == expected
        assert view[-1] is expected[-1] and len(view) == len(expected)


def test_the_commit_tally_follows_steps_undo_and_rewritten_logs() -> None:
    """The status bar's per-round tally reads only new events, yet always equals a recount."""
    session = Session(default_scenario())
    tally = CommitTally()

    def check() -> None:
        view = View(session.snapshot(), session.log_view())
        assert tally.last_rounds(view, 6) == CommitTally().last_rounds(view, 6)

    for action in ["step"] * 5 + ["undo", "step", "undo", "undo"] + ["step"] * 4:
        getattr(session, action)()
        check()
    # Logs that lost their tail, or whose last read event was rewritten, are recounted.
    log = list(session.log_view())
    last_commit = max(i for i, e in enumerate(log) if e["kind"] == "commit")
    shorter = log[: last_commit + 1]
    rewritten = [*shorter[:-1], dict(shorter[-1], tokens=[*shorter[-1]["tokens"], 0])]
    counts = []
    for events in (shorter, rewritten):
        view = View(session.snapshot(), events)
        counts.append(tally.last_rounds(view, 6))
        assert counts[-1] == CommitTally().last_rounds(view, 6)
    assert sum(counts[1]) == sum(counts[0]) + 1


def test_a_log_rewritten_behind_an_equal_event_is_read_again() -> None:
    """Readers of the log (the merged session log, the commit log, the status tally) check one
    position: it must be the very event they read, since after an undo the engine can write an
    equal event there while an earlier one differs."""
    read = [{"kind": "a"}, {"kind": "b"}, {"kind": "c"}]
    assert log_still_holds([*read, {"kind": "d"}], 3, read[-1])
    assert log_still_holds([], 0, None)
    assert not log_still_holds(read[:2], 3, read[-1])
    assert not log_still_holds([read[0], {"kind": "x"}, dict(read[2])], 3, read[-1])


def test_a_scenario_request_without_an_id_never_takes_one_named_later() -> None:
    """An unnamed submit gets a free request-N, skipping ids that later events (or requests
    added by hand) use: the names an author gave are kept and nothing collides."""
    scenario = parse_scenario(
        {
            "events": [
                {"tick": 0, "submit": {"prompt": [1, 2], "max_tokens": 12}},
                {"tick": 1, "submit": {"id": "request-1", "prompt": [3], "max_tokens": 2}},
                {"tick": 2, "cancel": "request-2"},
            ]
        }
    )
    session = Session(scenario)
    assert list(session.engine.requests) == ["request-2"]  # request-1 is taken later
    added = session.submit([4, 5], 2)  # by hand, before the scenario names request-1
    session.run()
    assert added not in {"request-1", "request-2"}
    assert set(session.engine.requests) == {"request-1", "request-2", added}
    assert session.engine.result("request-2").finish_reason == "cancelled"


def test_a_scenario_cancel_reaches_its_own_unnamed_request_after_a_hand_added_one() -> None:
    scenario = parse_scenario(
        {
            "events": [
                {"tick": 0, "submit": {"id": "a", "prompt": [1, 2], "max_tokens": 12}},
                {"tick": 2, "submit": {"prompt": [3, 4], "max_tokens": 12}},
                {"tick": 3, "cancel": "request-2"},
            ]
        }
    )
    session = Session(scenario)
    added = session.submit([5, 6], 12)  # by hand, before the unnamed submit arrives
    session.run()
    assert added != "request-2"
    assert session.engine.result("request-2").prompt == (3, 4)
    assert session.engine.result("request-2").finish_reason == "cancelled"
    assert session.engine.result(added).finish_reason == "length"


def test_cancelling_the_last_active_request_brings_the_next_scenario_events() -> None:
    session = Session(default_scenario())
    assert list(session.engine.requests) == ["request-1"]
    session.cancel("request-1")
    assert session.can_step() and "request-2" in session.engine.requests
    session.run()
    assert session.finished and not session.pending_events


def test_a_note_after_a_clock_moved_by_hand_says_it_may_not_hold() -> None:
    session = Session(default_scenario())
    session.advance_clock(5.0)  # past the scenario's own 3s (its warm stage)
    session.run()
    texts = [note["text"] for note in session.notes]
    warning = next(i for i, t in enumerate(texts) if "but it is already at 5s" in t)
    assert "the scenario sets the clock to 3s" in texts[warning]
    assert "may not hold" in texts[warning]
    assert texts[warning + 1].startswith("warm:")


def test_the_clock_never_leaves_finite_time() -> None:
    session = Session(default_scenario())
    session.advance_clock(1e308)
    before = session.snapshot()
    with pytest.raises(ValueError, match="finite"):
        session.advance_clock(1e308)
    assert session.snapshot() == before


def test_a_failed_round_leaves_undo_in_step_with_the_scenario(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_with_a_failed_round(fail: bool) -> Session:
        session = Session(default_scenario())
        while session.engine.tick < 4:
            session.step()
        if fail:
            real_round = Engine._round
            monkeypatch.setattr(Engine, "_round", _raise_once(real_round))
            with pytest.raises(RuntimeError, match="injected"):
                session.step()
            monkeypatch.setattr(Engine, "_round", real_round)
        session.undo()
        return session

    failed, plain = run_with_a_failed_round(True), run_with_a_failed_round(False)
    assert (failed.next_event, failed.clock.now, failed.notes) == (
        plain.next_event,
        plain.clock.now,
        plain.notes,
    )
    assert failed.engine.snapshot() == plain.engine.snapshot()
    failed.run()
    plain.run()
    # Every scenario request is still submitted, and runs as without the failure.
    assert set(failed.engine.requests) == {
        e.submit["id"] for e in failed.scenario.events if e.submit
    }
    assert failed.engine.snapshot()["requests"] == plain.engine.snapshot()["requests"]


def _raise_once(real: Callable[[Engine], None]) -> Callable[[Engine], None]:
    calls = {"n": 0}

    def round_or_fail(self: Engine) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected failure")
        real(self)

    return round_or_fail


def test_a_clock_move_below_its_precision_is_refused() -> None:
    session = Session(default_scenario())
    session.advance_clock(1.7e308)
    before = (session.snapshot(), list(session.operations), list(session.notes))
    with pytest.raises(ValueError, match="would not move"):
        session.advance_clock(1.0)
    assert (session.snapshot(), session.operations, session.notes) == before


def test_undo_names_the_operations_it_discards_with_the_round() -> None:
    session = Session(default_scenario())
    session.step()
    assert session.operations_undo_discards() == []
    session.step()
    added = session.submit([7, 7, 7], 3)
    session.advance_clock(0.5)
    discards = session.operations_undo_discards()
    assert [op["op"] for op in discards] == ["submit", "clock"]
    assert discards[0]["request_id"] == added and discards[1]["seconds"] == 0.5
    session.undo()
    # What it said went, went: the added request and the clock move.
    assert added not in session.engine.requests and session.clock.now == 0.0
    # The next undo takes round 1 only: the operations above were undone with round 2.
    assert session.operations_undo_discards() == []
    session.rollback("request-1", 1)
    assert [op["op"] for op in session.operations_undo_discards()] == ["rollback"]


def test_operations_given_numpy_values_are_recorded_as_json_and_replay_exactly() -> None:
    """The engine takes NumPy integers; the session's log is written as JSON and re-executed."""
    import json

    import numpy as np

    from deepinfer_tui.replay import Replay, parse_trace, trace_data

    session = Session(default_scenario())
    added = session.submit(np.array([1, 2, 3]), np.int64(4), np.int64(5))  # type: ignore[arg-type]
    session.step()
    session.step()
    session.rollback(added, np.int64(1))  # type: ignore[arg-type]
    data = json.loads(json.dumps(trace_data(session)))  # raised TypeError on np.int64 before
    submit = next(op for op in data["operations"] if op["op"] == "submit")
    assert submit == {
        "op": "submit",
        "prompt": [1, 2, 3],
        "max_tokens": 4,
        "eos_id": 5,
        "priority": 0,
    }
    replay = Replay(parse_trace(data))
    while replay.forward():
        pass
    assert not replay.divergence


def test_a_sampled_request_without_a_seed_replays_with_the_seed_it_drew() -> None:
    import json

    from deepinfer_tui.replay import Replay, parse_trace, trace_data

    session = Session(default_scenario())
    added = session.submit([1, 2, 3], 6, sampling={"temperature": 0.9, "top_p": 0.8})
    session.run()
    submit = next(op for op in session.operations if op["op"] == "submit")
    assert isinstance(submit["sampling"]["seed"], int)  # drawn at submit, recorded
    replay = Replay(parse_trace(json.loads(json.dumps(trace_data(session)))))
    while replay.forward():
        pass
    assert replay.divergence is None
    assert replay.session.engine.result(added).tokens == session.engine.result(added).tokens
