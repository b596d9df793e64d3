"""A cancel between rounds on the timeline: the round before it keeps what the request did in
it; the cancel takes the next round's cell, drawn past the current round until that runs."""

from __future__ import annotations

from deepinfer_tui.timeline_view import timeline_lines, timeline_states
from engine import Engine, EngineConfig, TinyModel
from tests.app.helpers import plain


def decoding_then_cancelled() -> Engine:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=8))
    engine.submit([1, 2, 3], max_tokens=9, request_id="x")
    engine.submit([4, 5, 6], max_tokens=9, request_id="y")
    engine.step()  # round 1: both prompts (6 rows of 8) and their first tokens
    engine.step()  # round 2: both decode
    engine.cancel("x")
    return engine


def test_the_cell_of_the_round_before_a_cancel_shows_what_the_request_did() -> None:
    engine = decoding_then_cancelled()
    shown = plain(timeline_lines(engine.trace, engine.tick, 40, 20, None, ("x", "y")))
    rows = {line[:2]: line[2:].rstrip() for line in shown}
    assert rows["x "] == "▒█✗"  # round 3's cell: one column past the current round
    assert rows["y "] == "▒█"
    assert rows["r "].endswith("·▼·")  # the axis: round 2 is the current one
    assert shown[-1] == "rounds 1-3 · 2 requests"


def test_when_the_next_round_runs_the_cancel_stays_in_its_cell() -> None:
    engine = decoding_then_cancelled()
    engine.step()  # round 3: y alone
    assert timeline_states(engine.trace)["x"] == {1: "prefilling", 2: "decoding", 3: "cancelled"}
    assert timeline_states(engine.trace)["y"][3] == "decoding"
    shown = plain(timeline_lines(engine.trace, engine.tick, 40, 20, None, ("x", "y")))
    assert {line[:2]: line[2:].rstrip() for line in shown}["r "].endswith("··▼")
