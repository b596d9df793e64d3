"""The metrics view's lines, from a real engine under a clock the test sets (issue 25)."""

from __future__ import annotations

from deepinfer_tui.metrics_view import metrics_lines, p95
from engine import Engine, EngineConfig, TinyModel
from tests.app.test_round_view import plain
from tests.app.test_timeline_view import crowded


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def three_rounds() -> Engine:
    """Submitted at 0 s; rounds read the clock at 1 s, 3 s and 4 s: the whole prompt and the
    first token in round 1, one token in each of the others. So TTFT 1 s, queue time 1 s,
    inter-token latencies 2 s and 1 s."""
    clock = Clock()
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=8), clock=clock)
    engine.submit([1, 2, 3], max_tokens=3, request_id="r")
    for now in (1.0, 3.0, 4.0):
        clock.now = now
        engine.step()
    return engine


def test_per_request_times_in_milliseconds() -> None:
    shown = plain(metrics_lines(three_rounds().snapshot(), 60, "r"))
    assert shown[0] == "ms · the injected clock"
    assert shown[1].split() == ["id", "ttft", "itl", "p95", "queue", "pre", "recomp"]
    assert shown[2].split() == ["r", "1000.0", "1500.0", "2000.0", "1000.0", "0", "0"]
    assert "ITL r (max 2000.0 ms) █▄" in shown


def test_engine_counters_and_a_narrow_pane() -> None:
    engine = three_rounds()
    shown = plain(metrics_lines(engine.snapshot(), 30, None))
    assert shown[1].split() == ["id", "ttft", "itl", "p95"]  # the columns that fit in 30
    assert "acceptance by depth: no drafts verified yet" in shown
    assert "mean acceptance length: - (no drafting rounds)" in shown
    assert "prefix hits: 0/3 tokens (0%) · KV usage 0%" in " ".join(shown)  # may wrap
    assert shown[-1] == "preemptions 0 · recomputed 0 positions"
    assert "ITL: select a request that has decoded" in shown


def test_a_synthetic_clock_says_so() -> None:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(synthetic_clock=True))
    engine.submit([1, 2, 3], max_tokens=2)
    engine.step()
    assert "SYNTHETIC clock" in plain(metrics_lines(engine.snapshot(), 80))[0]


def test_a_clock_that_never_moved_is_pointed_out() -> None:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=8), clock=Clock())
    engine.submit([1, 2, 3], max_tokens=3, request_id="r")
    engine.step()
    engine.step()
    shown = plain(metrics_lines(engine.snapshot(), 200, "r"))
    assert (
        shown[0]
        == "ms · all 0: the clock stood still while they ran (synthetic_clock models a cost)"
    )
    row = next(line for line in shown if line.startswith("r "))
    assert row.split()[:4] == ["r", "0.0", "0.0", "0.0"]
    assert plain(metrics_lines(three_rounds().snapshot(), 200, "r"))[0] == (
        "ms · the injected clock"
    )


def test_p95_is_the_nearest_rank() -> None:
    assert p95(list(range(1, 21))) == 19  # ceil(0.95 * 20) = 19th of 20
    assert p95([5.0]) == 5.0 and p95([]) is None


def test_preemptions_and_recomputed_positions_per_request() -> None:
    shown = plain(metrics_lines(crowded().snapshot(), 80, "c"))
    rows = {line.split()[0]: line.split() for line in shown if line[:2] in ("a ", "b ", "c ")}
    # c was preempted twice (rounds 5 and 9) holding 3 and 4 stored positions. Readmitted in
    # round 7 (the cache held its 3), it gave its place back before running, as vLLM leaves a
    # new request unscheduled: no preemption. It ran again in round 8 with nothing restored
    # (3 recomputed) and in round 11 with nothing restored (4): 3 + 4 recomputed.
    assert rows["c"][-2:] == ["2", "7"] and rows["a"][-2:] == ["0", "0"]
    assert shown[-1] == "preemptions 2 · recomputed 7 positions"


def test_a_snapshot_without_serving_figures_shows_dashes() -> None:
    """A trace saved before the engine had timing: nothing to show, and no crash."""
    shown = plain(metrics_lines({"requests": [{"id": "x", "timing": None}]}, 60, "x"))
    assert shown[2].split() == ["x", "-", "-", "-", "-", "0", "0"]
    assert "ITL: select a request that has decoded" in shown
