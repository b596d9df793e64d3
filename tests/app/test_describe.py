"""Log lines as a person reads them: counts agree with their nouns, rounds and seconds differ."""

from __future__ import annotations

import re

from deepinfer_tui.describe import describe
from engine import Engine, EngineConfig, TinyModel, make_draft


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
