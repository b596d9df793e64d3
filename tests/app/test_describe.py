"""Log lines as a person reads them: counts agree with their nouns, rounds and seconds differ."""

from __future__ import annotations

import re

from rich.console import Console

from deepinfer_tui.describe import describe, format_blocks, format_counts
from deepinfer_tui.document import request_section
from engine import Engine, EngineConfig, TinyModel, make_draft
from tests.app.test_perfetto_intervals import crowded_session


def _second_round_events(draft_width: int) -> list[dict[str, object]]:
    target = TinyModel(seed=3)
    now = [0.0]
    engine = Engine(
        target,
        make_draft(target, seed=4),
        config=EngineConfig(draft_width=draft_width, draft_branching=1, max_batch_tokens=8),
        clock=lambda: now[0],
    )
    engine.submit([1, 2, 3, 4, 5], max_tokens=4)
    engine.step()  # the prefill publishes the prompt's prefix
    now[0] = 2.5
    engine.submit([1, 2, 3, 4, 5, 6], max_tokens=4)
    return engine.step()


def test_a_draft_of_one_node_says_node() -> None:
    events = _second_round_events(draft_width=1)
    lines = [describe(e) for e in events if e["kind"] == "draft"]
    one = [line for line in lines if "draft tree: 1 node," in line]
    assert one, lines
    assert not any("1 nodes" in line for line in lines)


def test_rounds_are_t_n_and_clock_times_are_seconds() -> None:
    events = _second_round_events(draft_width=2)
    lines = [describe(e) for e in events]
    assert all(re.match(r"t2\b", line) for line in lines), lines
    (restore,) = [describe(e) for e in events if e["kind"] == "restore" and e["cache"] == "hot"]
    # Published at 0s, hot for the default state_ttl: the expiry is a time, not a round.
    assert re.search(r"alive until [0-9.]+s\b", restore), restore
    assert "t=" not in " ".join(lines)


def test_block_ids_fold_runs_of_consecutive_ids_into_ranges() -> None:
    assert format_blocks([]) == ""
    assert format_blocks([4]) == "#4"
    assert format_blocks([224, 225, 226, 227]) == "#224-#227"
    assert format_blocks([2, 7, 8, 9, 3]) == "#2 #7-#9 #3"  # their order is kept
    assert format_blocks([9, 8, 7]) == "#9 #8 #7"  # a run counts upwards only
    event = {"kind": "publish", "tick": 3, "request_id": "a", "positions": 800}
    line = describe({**event, "blocks": list(range(224, 274)), "hot_until": 3, "warm_until": 9})
    assert "in #224-#273 (" in line


def test_counts_fold_runs_of_four_or_more_equal_neighbours() -> None:
    assert format_counts([]) == "[]"
    assert format_counts([2, 2, 2]) == "[2, 2, 2]"  # three read as short as folded
    assert format_counts([2] * 10 + [3] + [2] * 53) == "[2 ×10, 3, 2 ×53]"
    assert format_counts([1, 2, 3, 4]) == "[1, 2, 3, 4]"


def test_a_schedule_of_many_alike_requests_folds_them_into_one_entry() -> None:
    def part(i: int, prefill: int = 0) -> dict:
        return {"request_id": f"r{i}", "prefill": prefill, "decode": int(not prefill), "draft": 1}

    parts = [part(i) for i in range(1, 65)]
    parts[10] = part(11, prefill=40)
    line = describe({"kind": "schedule", "tick": 4, "rows": 128, "budget": 2048, "requests": parts})
    assert line == (
        "t4 schedule 128 rows of 2,048: r1 … r10 (10) decode 1 + draft 1, "
        "r11 prefill 40 + draft 1, r12 … r64 (53) decode 1 + draft 1"
    )
    few = describe({"kind": "schedule", "tick": 1, "rows": 6, "requests": parts[:3]})
    assert (
        few
        == "t1 schedule 6 rows: r1 decode 1 + draft 1, r2 decode 1 + draft 1, r3 decode 1 + draft 1"
    )


def test_a_request_preempted_once_says_time_not_times() -> None:
    config = EngineConfig(num_blocks=8, block_size=2, max_active=4)
    engine = Engine(TinyModel(seed=2, depth=2), None, config=config)
    for first in range(1, 5):
        engine.submit([first, 2, 3, 4, 5, 6], max_tokens=8)
    engine.run()
    requests = engine.snapshot()["requests"]
    assert [r["preemptions"] for r in requests] == [1, 1, 1, 1]
    console = Console(width=100, record=True)
    console.print(request_section(requests[0]))
    shown = console.export_text()
    assert "preempted 1 time" in shown and "preempted 1 times" not in shown


def test_a_preemption_tells_recomputing_apart_from_computing_for_the_first_time() -> None:
    # The crowded scenario preempts c at t9 holding 4 stored positions (its 3-token prompt and
    # one token), none of them cached: readmitted, all 4 are recomputed, and its 5 tokens'
    # positions are computed in all. At t5 the cache kept all 3 it held: nothing to recompute,
    # 1 position to compute (the token it was about to decode).
    lines = {
        e["tick"]: describe(e)
        for e in crowded_session().log()
        if e["kind"] == "preempt" and e["request_id"] == "c"
    }
    assert (
        "the cache keeps 3 for now; readmitted now, it would recompute 0 and compute 1 in all"
        in lines[5]
    )
    assert (
        "the cache keeps 0 for now; readmitted now, it would recompute 4 and compute 5 in all"
        in lines[9]
    )
