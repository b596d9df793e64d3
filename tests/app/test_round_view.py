"""The round view's lines, from a real engine's schedule events (issue 22)."""

from __future__ import annotations

from deepinfer_tui.round_view import last_schedule, round_lines
from engine import Engine, EngineConfig, TinyModel
from tests.app.helpers import plain


def test_the_round_view_splits_the_budget_by_request_and_kind() -> None:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=10, block_size=4))
    decoding = engine.submit([1, 2], max_tokens=6)
    engine.step()
    prefilling = engine.submit([3] * 20, max_tokens=2)
    engine.step()
    shown = plain(round_lines(last_schedule(engine.trace), 80))
    assert shown[0].startswith("█ prefill  ▓ decode  ░ draft")
    lines = {line.split()[0]: line for line in shown[1:-1]}
    assert lines[decoding].endswith(" 1 decode")
    assert lines[prefilling].endswith(" 9 prefill")  # what the pending position left of 10
    # Bars are drawn against the budget: 9 of 10 rows take most of the bar, 1 row a little.
    assert lines[prefilling].count("█") > 5 * lines[decoding].count("▓") > 0
    assert shown[-1] == "round t2: 10 rows of the token budget 10 (100%)"


def test_without_a_round_or_a_budget_the_view_says_so() -> None:
    assert plain(round_lines(None, 60)) == ["no round has run yet: press space to step"]
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=None))
    engine.submit([1, 2, 3], max_tokens=1)
    engine.step()
    assert plain(round_lines(last_schedule(engine.trace), 60))[-1] == (
        "round t1: 3 rows (no token budget)"
    )
