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
    # A cell a row: 9 rows take 9 cells, 1 row one.
    assert lines[prefilling].count("█") == 9 and lines[decoding].count("▓") == 1
    assert shown[-1] == "round t2: 10 rows of the token budget 10 (100%)"


def test_without_a_round_or_a_budget_the_view_says_so() -> None:
    assert plain(round_lines(None, 60)) == ["no round has run yet: press space to step"]
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=None))
    engine.submit([1, 2, 3], max_tokens=1)
    engine.step()
    assert plain(round_lines(last_schedule(engine.trace), 60))[-1] == (
        "round t1: 3 rows (no token budget)"
    )


def test_bars_of_a_few_rows_differ_by_their_row_counts() -> None:
    # Two decoding requests, one verifying more draft nodes than the other: a cell a row, so
    # their bars differ as their counts do, though both are a sliver of the 2048 budget.
    event = {
        "tick": 4,
        "budget": 2048,
        "rows": 8,
        "requests": [
            {"request_id": "r1", "prefill": 0, "decode": 1, "draft": 4},
            {"request_id": "r2", "prefill": 0, "decode": 1, "draft": 2},
        ],
    }
    shown = plain(round_lines(event, 80))
    assert shown[0].endswith("· a cell is a row")
    bars = {line.split()[0]: line.split()[1] for line in shown[1:-1]}
    assert bars["r1"].startswith("▓░░░░·") and bars["r2"].startswith("▓░░·")
    # Rows beyond the bar's width: scaled to the largest request, which fills the bar.
    wide = dict(event, requests=[{"request_id": "r1", "prefill": 500, "decode": 0, "draft": 0}])
    shown = plain(round_lines(wide, 80))
    assert shown[0].endswith(f"· a cell is {500 / len(shown[1].split()[1]):.3g} rows")
    assert set(shown[1].split()[1]) == {"█"}
