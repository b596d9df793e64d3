"""The Perfetto export's per-request intervals and counter tracks (issue 25): each request's
life, queued -> prefill -> decode and its preemptions as slices on its thread, begin and end
on round boundaries of the synthetic time base; the serving metrics as counters."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deepinfer_tui.export import render_exports
from deepinfer_tui.perfetto import perfetto_trace
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.timeline_view import timeline_states
from tests.app.test_export_views import crafted_session

ROUND = 1000  # µs: round t spans (t - 1) * 1000 to t * 1000

# Budget 6 rows a round, 8 blocks of 4: c is preempted whenever a and b need a block.
CROWDED: dict[str, Any] = {
    "name": "crowded",
    "model": {"vocab_size": 32, "width": 16, "depth": 2, "window": 4},
    "draft": None,
    "config": {"token_budget": 6, "block_size": 4, "num_blocks": 8},
    "events": [
        {"tick": 0, "submit": {"id": "a", "prompt": list(range(1, 11)), "max_tokens": 6}},
        {"tick": 0, "submit": {"id": "b", "prompt": [3] * 9, "max_tokens": 8}},
        {"tick": 0, "submit": {"id": "c", "prompt": [5] * 3, "max_tokens": 3}},
    ],
}


def crowded_session() -> Session:
    session = Session(parse_scenario(CROWDED))
    session.run()
    return session


def intervals(trace: dict[str, Any], request_id: str) -> list[tuple[str, int, int]]:
    """(name, first round, last round) of each life and interval slice on the request's thread."""
    tid = next(
        e["tid"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == request_id
    )
    found = []
    for event in trace["traceEvents"]:
        if event["ph"] == "X" and event["tid"] == tid and event["cat"] in ("request", "interval"):
            begin, end = event["ts"], event["ts"] + event["dur"]
            assert begin % ROUND == 0 and end % ROUND == 0  # on round boundaries
            found.append((event["name"], begin // ROUND + 1, end // ROUND))
    return found


def test_each_requests_life_is_queued_then_prefill_then_decode_in_its_rounds() -> None:
    trace = perfetto_trace(crafted_session())
    # a: scheduled at once; its prompt and first token in round 1; done in round 3.
    assert intervals(trace, "a") == [("a", 1, 3), ("prefill", 1, 1), ("decode", 2, 3)]
    # b: queued through rounds 1-3, prompt and first token in round 4, its last in round 5.
    assert intervals(trace, "b") == [
        ("b", 1, 5),
        ("queued", 1, 3),
        ("prefill", 4, 4),
        ("decode", 5, 5),
    ]
    # c: cancelled between rounds 2 and 3 while still queued.
    assert intervals(trace, "c") == [("c", 1, 2), ("queued", 1, 2)]


def test_the_life_slice_carries_the_requests_clock_timing() -> None:
    events = perfetto_trace(crafted_session())["traceEvents"]
    life = {e["name"]: e["args"] for e in events if e.get("cat") == "request"}
    # Round clocks 0, 0.25, 0.75, 1.0, 1.125 s (see crafted_session).
    assert life["a"]["ttft"] == 0.0 and life["a"]["itl_mean"] == 0.375
    assert life["a"]["itl_p95"] == 0.5 and life["a"]["e2e"] == 0.75
    assert life["b"]["queue_time"] == 1.0 and life["b"]["ttft"] == 1.0
    assert life["c"]["finish_reason"] == "cancelled" and life["c"]["ttft"] is None


def test_a_preemption_is_an_interval_until_the_request_runs_again() -> None:
    session = crowded_session()
    trace = perfetto_trace(session)
    preempted = [i for i in intervals(trace, "c") if i[0] == "preempted"]
    log = session.log()
    preempt_rounds = [e["tick"] for e in log if e["kind"] == "preempt" and e["request_id"] == "c"]
    assert preempt_rounds == [5, 9]
    # Preempted until it runs again (rounds 8 and 11): readmitted in round 7, it gave its
    # place back before running, which the timeline draws as waiting.
    assert [(first, last) for _, first, last in preempted] == [(5, 7), (9, 10)]
    row = timeline_states(log)["c"]
    assert {t for t, state in row.items() if state == "preempted"} == {5, 6, 9, 10}
    assert row[7] == "waiting" and row[8] == "prefilling" and row[11] == "finished"
    args = [e["args"] for e in trace["traceEvents"] if e.get("name") == "preempted"]
    assert [a["preemptions"] for a in args] == [1, 1]
    assert [a["runs again in"] for a in args] == ["t8", "t11"]


def well_nested(events: list[dict[str, Any]]) -> bool:
    """Whether every thread's slices nest (the JSON format's rule for "X" slices), taking
    them in time order and, at one time, in file order (outer slices are written first)."""
    by_thread: dict[int, list[tuple[int, int, int]]] = {}
    for index, event in enumerate(events):
        if event["ph"] == "X":
            end = event["ts"] + event["dur"]
            by_thread.setdefault(event["tid"], []).append((event["ts"], index, end))
    for slices in by_thread.values():
        open_ends: list[int] = []
        for begin, _, end in sorted(slices):
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                return False
            open_ends.append(end)
    return True


def test_every_threads_slices_nest() -> None:
    for session in (crowded_session(), crafted_session()):
        assert well_nested(perfetto_trace(session)["traceEvents"])
    default = Session(default_scenario())
    default.run()
    assert well_nested(perfetto_trace(default)["traceEvents"])


def test_the_serving_metrics_are_counter_tracks() -> None:
    session = crowded_session()
    data = json.loads(render_exports(session, ["perfetto"])["perfetto"])
    counters: dict[str, list[dict[str, Any]]] = {}
    for event in data["traceEvents"]:
        if event["ph"] == "C":
            assert all(isinstance(v, int | float) for v in event["args"].values())
            counters.setdefault(event["name"], []).append(event)
    expected = {"blocks", "KV usage %", "requests", "acceptance %", "prefix hit rate %"}
    assert expected | {"preemptions", "rows per round", "tokens per round"} <= set(counters)
    ticks = session.engine.tick
    assert [c["ts"] for c in counters["requests"]] == [t * ROUND for t in range(ticks + 1)]
    # Before round 1: three queued; the end: nothing left.
    assert counters["requests"][0]["args"] == {"running": 0, "queued": 3}
    assert counters["requests"][-1]["args"] == {"running": 0, "queued": 0}
    assert counters["preemptions"][-1]["args"] == {"total": 2}
    # What a round did sits at its start: round 1 computed 6 prompt rows (the budget).
    rows = counters["rows per round"]
    assert [c["ts"] for c in rows] == [(t - 1) * ROUND for t in range(1, ticks + 1)]
    assert rows[0]["args"] == {"prefill": 6, "decode": 0, "draft": 0}
    assert all(sum(c["args"].values()) <= 6 for c in rows)  # never past the token budget
    committed = sum(c["args"]["committed"] for c in counters["tokens per round"])
    assert committed == 6 + 8 + 3  # every token of a, b and c, once
    usage = counters["KV usage %"]
    assert all(0 <= c["args"]["used"] <= 100 for c in usage) and usage[-1]["args"]["used"] == 0


def test_the_same_session_gives_the_same_file() -> None:
    first = render_exports(crowded_session(), ["perfetto"])["perfetto"]
    assert render_exports(crowded_session(), ["perfetto"])["perfetto"] == first
    assert "synthetic: engine round t is drawn from (t-1)*1000 to t*1000" in first


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["step", "step", "cancel", "rollback", "undo", "submit", "clock"]),
        st.integers(0, 9),
    ),
    max_size=30,
)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(operations=OPERATIONS)
def test_slices_nest_on_round_boundaries_whatever_the_interleaving(
    operations: list[tuple[str, int]],
) -> None:
    session = Session(parse_scenario(CROWDED))
    for operation, number in operations:
        requests = session.snapshot()["requests"]
        live = [r["id"] for r in requests if r["status"] != "finished"]
        rollable = [r["id"] for r in requests if r["can_rollback"]]
        if operation == "step" and session.can_step():
            session.step()
        elif operation == "cancel" and live:
            session.cancel(live[number % len(live)])
        elif operation == "rollback" and rollable:
            session.rollback(rollable[number % len(rollable)], 1)
        elif operation == "undo" and session.can_undo():
            session.undo()
        elif operation == "submit":
            session.submit([number + 1] * (number % 5 + 1), max_tokens=number % 4 + 1)
        elif operation == "clock":
            session.advance_clock(0.5)
    trace = perfetto_trace(session)
    assert well_nested(trace["traceEvents"])
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(s["dur"] > 0 for s in slices)
    for request in session.snapshot()["requests"]:
        found = intervals(trace, request["id"])
        if found:  # none for a request cancelled in the moment it came
            (name, first, last), *inner = found  # its life first, holding the others
            assert name == request["id"] and last <= session.engine.tick
            assert all(first <= low and high <= last for _, low, high in inner)
