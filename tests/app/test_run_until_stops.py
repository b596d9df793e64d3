""" "Run until" (R) stops at each of the four things issue 25 names: a preemption, an eviction
(under every cache policy's event), a rejected draft and a finished request; and at nothing
else a round does."""

from __future__ import annotations

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.time_travel import stop_reason
from tests.app.helpers import messages

STOPS = [
    ({"kind": "preempt", "request_id": "a"}, "a was preempted"),
    ({"kind": "evict", "request_id": None, "positions": 8}, "the prefix cache evicted 8 positions"),
    ({"kind": "block_evicted", "request_id": None, "block": 3}, "the prefix cache evicted block 3"),
    (
        {"kind": "commit", "request_id": "b", "outcome": "replacement"},
        "b had a draft rejected",
    ),
    (
        {"kind": "finished", "request_id": "c", "finish_reason": "length"},
        "c finished (length)",
    ),
]


@pytest.mark.parametrize(("event", "reason"), STOPS)
def test_each_notable_event_stops_and_says_why(event: dict, reason: str) -> None:
    before = [{"kind": "schedule", "request_id": None}, {"kind": "verify", "request_id": "x"}]
    assert stop_reason([*before, event]) == reason


@pytest.mark.parametrize(
    "kind",
    [
        "queued",
        "restore",
        "draft",
        "budget",
        "schedule",
        "prefill",
        "deferred",
        "verify",
        "publish",
        "block_cached",
        "insert",
        "rollback",
    ],
)
def test_the_other_events_of_a_round_do_not_stop(kind: str) -> None:
    assert stop_reason([{"kind": kind, "request_id": "a"}]) is None
    assert stop_reason([{"kind": "commit", "request_id": "a", "outcome": "bonus"}]) is None


def test_a_hand_edited_event_without_its_fields_still_reads() -> None:
    assert stop_reason([{"kind": "evict"}]) == "the prefix cache evicted ? positions"


async def test_run_until_stops_at_a_block_eviction_under_the_blocks_policy() -> None:
    scenario = default_scenario().with_overrides(
        cache_policy="blocks", num_blocks=8, block_size=2, token_budget=4
    )
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(40):
            await pilot.press("R")
            await pilot.pause()
            if "evicted block" in messages(app)[-1]:
                break
        tick = app.engine.tick
        assert messages(app)[-1].startswith(f"round {tick}: the prefix cache evicted block ")
        kinds = {e["kind"] for e in app.engine.trace if e["tick"] == tick}
        assert "block_evicted" in kinds
