"""Submit operations in a trace carry their sampling and priority: they replay exactly, an
old submit without them still loads, and bad settings are refused at load naming the field."""

from __future__ import annotations

import copy

import pytest

from deepinfer_tui.replay import Replay
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.tracefile import TraceError, parse_trace, trace_data


def recorded() -> Session:
    session = Session(default_scenario().with_overrides(schedule_policy="priority"))
    session.step()
    session.submit([2, 4, 6], 5, priority=-2, sampling={"temperature": 1.2, "top_p": 0.7})
    session.submit([2, 4, 7], 4, priority=5)
    session.run()
    return session


def test_sampled_and_prioritised_submits_are_recorded_and_replay_exactly() -> None:
    session = recorded()
    submits = [op for op in session.operations if op["op"] == "submit"]
    assert [op["priority"] for op in submits] == [-2, 5]
    seed = submits[0]["sampling"]["seed"]  # drawn at submit, recorded for the replay
    assert isinstance(seed, int)
    assert submits[0]["sampling"] == {"temperature": 1.2, "top_k": 0, "top_p": 0.7, "seed": seed}
    assert "sampling" not in submits[1]  # greedy
    replay = Replay(parse_trace(trace_data(session)), frames=False)
    assert replay.reproduced, replay.divergence
    view = {r["id"]: r for r in replay.session.snapshot()["requests"]}["user-1"]
    assert view["sampling"]["seed"] == seed and view["priority"] == -2


def test_a_submit_recorded_without_priority_or_sampling_still_replays() -> None:
    session = Session(default_scenario())
    session.step()
    session.submit([1, 1, 2], 3)
    session.run()
    data = trace_data(session)
    for op in data["operations"]:
        if op["op"] == "submit":
            del op["priority"]  # as a trace written before priorities were recorded
    assert Replay(parse_trace(data), frames=False).reproduced


@pytest.mark.parametrize(
    ("sampling", "problem"),
    [
        ({"temperature": -1}, "submit sampling: temperature must be a finite number >= 0"),
        ({"temperature": 1, "top_p": 2}, "submit sampling: top_p must be a number in (0, 1]"),
        ({"temp": 1}, "submit sampling: unknown sampling field(s): temp"),
    ],
)
def test_a_bad_sampling_in_a_trace_is_refused_at_load(sampling: dict, problem: str) -> None:
    data = copy.deepcopy(trace_data(recorded()))
    index = next(i for i, op in enumerate(data["operations"]) if op["op"] == "submit")
    data["operations"][index]["sampling"] = sampling
    with pytest.raises(TraceError) as refused:
        parse_trace(data, "t.json")
    assert str(refused.value).startswith(f"t.json: operations[{index}]: {problem}")
