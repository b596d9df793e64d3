"""Serving metrics: per-request timing under an injected clock, and the engine-wide figures.

Scenarios are small and crafted so every expected number is worked out by hand from the
rounds each event happens in (stated in the test) and the clock reading of those rounds.
"""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from tests.engine.helpers import ManualClock


def drain(engine: Engine, clock: ManualClock, reading) -> None:
    """Step until idle, the clock reading `reading(round)` as each round starts."""
    while not engine.idle:
        clock.now = reading(engine.tick + 1)
        engine.step()


def commit_rounds(engine: Engine, request_id: str) -> list[tuple[int, int]]:
    """(round, tokens committed) of each of the request's commits, from the trace."""
    return [
        (e["tick"], len(e["tokens"]))
        for e in engine.trace
        if e["kind"] == "commit" and e["request_id"] == request_id
    ]


def fields(engine: Engine, kind: str, *names: str) -> list[tuple]:
    """The named fields of every event of `kind`, in trace order."""
    return [tuple(e[name] for name in names) for e in engine.trace if e["kind"] == kind]


def test_timing_of_a_plain_request() -> None:
    clock = ManualClock(0.25)
    engine = Engine(clock=clock)
    engine.submit([1, 2, 3], max_tokens=3, request_id="a")
    drain(engine, clock, lambda r: 2.0 * r + 0.5)  # rounds read 2.5, 4.5, 6.5
    timing = engine.result("a").timing
    assert commit_rounds(engine, "a") == [(1, 1), (2, 1), (3, 1)]
    assert timing["queued"] == 0.25 and timing["queued_round"] == 0
    assert (timing["scheduled"], timing["scheduled_round"]) == (2.5, 1)
    assert (timing["first_token"], timing["first_token_round"]) == (2.5, 1)
    assert (timing["finished"], timing["finished_round"]) == (6.5, 3)
    assert timing["queue_time"] == 2.25
    assert timing["ttft"] == 2.25
    assert timing["prefill_time"] == 0.0
    assert timing["decode_time"] == 4.0
    assert timing["e2e"] == 6.25
    assert timing["itl"] == [2.0, 2.0]
    assert timing["preemptions"] == 0
    view = {r["id"]: r for r in engine.snapshot()["requests"]}["a"]
    assert view["timing"] == timing
    assert engine.result("a").to_dict()["timing"] == timing


def test_a_chunked_prefill_counts_in_ttft_and_prefill_time() -> None:
    clock = ManualClock(0.0)
    # A 10-position prompt, 4 rows a round: rows 0-3, 4-7, then 8-9 with the first token.
    engine = Engine(clock=clock, config=EngineConfig(token_budget=4))
    engine.submit(list(range(1, 11)), max_tokens=2, request_id="a")
    clock.now = 1.0
    engine.submit([5, 6], max_tokens=1, request_id="late")  # queued at 1.0, after "a"
    drain(engine, clock, lambda r: 10.0 * r)
    prefills = [(e["tick"], e["start"], e["stop"]) for e in engine.trace if e["kind"] == "prefill"]
    assert [p for p in prefills if p[0] < 3][:2] == [(1, 0, 4), (2, 4, 8)]
    assert commit_rounds(engine, "a") == [(3, 1), (4, 1)]
    timing = engine.result("a").timing
    assert (timing["scheduled"], timing["first_token"], timing["finished"]) == (10.0, 30.0, 40.0)
    assert timing["queue_time"] == 10.0
    assert timing["prefill_time"] == 20.0  # two chunks without a token
    assert timing["ttft"] == 30.0
    assert timing["itl"] == [10.0]
    late = engine.result("late").timing
    assert late["queued"] == 1.0
    assert late["ttft"] == late["first_token"] - 1.0


def test_a_preemption_during_decode_lengthens_one_inter_token_latency() -> None:
    clock = ManualClock(0.0)
    # Two requests that cannot both grow in 6 blocks of 2: "b" is preempted in round 6 with 6
    # positions stored, readmitted cold in round 9 (its offered prefix was evicted) and
    # commits again in round 11.
    engine = Engine(clock=clock, config=EngineConfig(block_size=2, num_blocks=6))
    engine.submit([1, 2, 3], max_tokens=6, request_id="a")
    engine.submit([4, 5, 6], max_tokens=6, request_id="b")
    drain(engine, clock, lambda r: 1.5 * r)
    assert fields(engine, "preempt", "tick", "request_id", "lost_positions") == [(6, "b", 6)]
    assert fields(engine, "restore", "tick", "reused_positions")[-1] == (9, 0)
    rounds = [tick for tick, _ in commit_rounds(engine, "b")]
    assert rounds == [1, 2, 4, 5, 11, 12]
    b = engine.result("b").timing
    # The preemption restarts nothing (vLLM): TTFT is the first round's; the gap from round
    # 5 to 11 is one inter-token latency; the decode time holds it.
    assert b["ttft"] == 1.5 and b["queue_time"] == 1.5
    assert b["itl"] == [1.5, 3.0, 1.5, 9.0, 1.5]
    assert b["decode_time"] == 16.5
    assert b["e2e"] == 18.0
    assert (b["preemptions"], b["recomputed_positions"]) == (1, 6)  # all 6 computed again
    serving = engine.metrics()["serving"]
    assert (serving["preemptions"], serving["recomputed_positions"]) == (1, 6)
    assert [serving["kept_positions"]] == [
        k for (k,) in fields(engine, "preempt", "kept_positions")
    ]
    assert engine.result("a").timing["preemptions"] == 0


def test_preemptions_during_prefill_lengthen_ttft_and_prefill_time() -> None:
    clock = ManualClock(0.0)
    # "b"'s 12-position prompt, 4 rows a round in a pool of 8 blocks of 2: "a" growing
    # preempts it twice mid-prefill (rounds 5 and 8, with 7 and 6 positions stored); it is
    # readmitted cold, then with a 3-position hot hit (a's prompt is its first 3 tokens), and
    # reaches its first token in round 12.
    config = EngineConfig(block_size=2, num_blocks=8, token_budget=4)
    engine = Engine(clock=clock, config=config)
    engine.submit([1, 2, 3], max_tokens=8, request_id="a")
    engine.submit(list(range(1, 13)), max_tokens=2, request_id="b")
    drain(engine, clock, lambda r: 0.5 * r)
    assert fields(engine, "preempt", "tick", "lost_positions") == [(5, 7), (8, 6)]
    assert fields(engine, "restore", "tick", "reused_positions")[-2:] == [(6, 0), (9, 3)]
    assert commit_rounds(engine, "b") == [(12, 1), (13, 1)]
    b = engine.result("b").timing
    assert (b["scheduled_round"], b["first_token_round"]) == (1, 12)
    assert b["queue_time"] == 0.5  # the first admission; readmissions restart nothing
    assert b["ttft"] == 6.0
    assert b["prefill_time"] == 5.5
    assert b["itl"] == [0.5]
    assert (b["preemptions"], b["recomputed_positions"]) == (2, 7 + (6 - 3))


def one_round(max_tokens: int) -> tuple[Engine, ManualClock]:
    """An engine with request "a" (queued at 0.0) after one round read at 1.0."""
    clock = ManualClock(0.0)
    engine = Engine(clock=clock)
    engine.submit([1, 2, 3], max_tokens=max_tokens, request_id="a")
    clock.now = 1.0
    engine.step()
    return engine, clock


def test_a_cancel_between_rounds_finishes_at_the_last_reading() -> None:
    engine, clock = one_round(5)
    clock.now = 4.0
    engine.cancel("a")  # the engine reads no clock to cancel: round 1's reading
    assert engine.result("a").timing["finished"] == 1.0
    engine.submit([1, 2], max_tokens=1, request_id="b")  # read at 4.0
    clock.now = 9.0
    engine.submit([3, 4], max_tokens=1, request_id="c")  # read at 9.0
    engine.cancel("b")
    assert engine.result("b").timing["e2e"] == 5.0
    assert engine.result("b").timing["scheduled"] is None


def _drafting_engine(noise: float, clock: ManualClock, **config) -> Engine:
    target = TinyModel(seed=7)
    draft = make_draft(target, seed=8, noise=noise)
    return Engine(target, draft, clock=clock, config=EngineConfig(**config))


def test_a_round_of_k_tokens_gives_the_gap_then_k_minus_one_zeros() -> None:
    clock = ManualClock(0.0)
    engine = _drafting_engine(0.05, clock, draft_width=3)
    engine.submit([1, 2, 3, 4], max_tokens=10, request_id="a")
    drain(engine, clock, lambda r: 2.0 * r + 0.5)
    # Round 1 the prompt (one token), rounds 2 and 3 a full chain of 3 plus the bonus, round
    # 4 the last token.
    assert commit_rounds(engine, "a") == [(1, 1), (2, 4), (3, 4), (4, 1)]
    timing = engine.result("a").timing
    assert timing["itl"] == [2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0]
    assert timing["decode_time"] == 6.0 == sum(timing["itl"])
    serving = engine.metrics()["serving"]
    assert serving["drafting_rounds"] == 2
    assert serving["mean_acceptance_length"] == 4.0  # 1 + 6 accepted / 2 rounds
    assert [d["verified"] for d in serving["acceptance_by_depth"]] == [2, 2, 2]


def test_acceptance_identities_over_a_noisy_chain_draft() -> None:
    clock = ManualClock(0.0)
    engine = _drafting_engine(2.0, clock, draft_width=4)
    for seed in range(4):
        engine.submit([seed + 1, 2, seed + 3, 4, 5], max_tokens=12)
    drain(engine, clock, lambda r: float(r))
    results = engine.run()
    serving = engine.metrics()["serving"]
    by_depth = serving["acceptance_by_depth"]
    verified = [d["verified"] for d in by_depth]
    accepted = [d["accepted"] for d in by_depth]
    assert verified == sorted(verified, reverse=True)  # a chain verifies a prefix of itself
    assert all(a <= v for a, v in zip(accepted, verified))
    assert sum(accepted) < sum(verified)  # this noise rejects some: the check is not vacuous
    assert sum(verified) == engine.metrics()["drafts"]["verified"]
    drafting_rounds = sum(1 for e in engine.trace if e["kind"] == "commit" and e["verified"])
    total_accepted = sum(r.accepted_drafts for r in results)
    assert serving["drafting_rounds"] == drafting_rounds
    assert serving["mean_acceptance_length"] == pytest.approx(
        1 + total_accepted / drafting_rounds, abs=1e-12
    )
    for result in results:
        itl = result.timing["itl"]
        assert len(itl) == len(result.tokens) - 1
        assert sum(itl) == pytest.approx(result.timing["decode_time"], abs=1e-12)
        timing = result.timing
        assert timing["ttft"] == timing["queue_time"] + timing["prefill_time"]
        assert timing["e2e"] == timing["ttft"] + timing["decode_time"]  # finished at its last


def test_prefix_hits_count_reused_positions() -> None:
    clock = ManualClock(0.0)
    engine = Engine(clock=clock, config=EngineConfig(block_size=4))
    engine.submit(list(range(1, 10)), max_tokens=2, request_id="first")
    drain(engine, clock, lambda r: 0.1 * r)
    engine.submit([*range(1, 10), 11, 12], max_tokens=2, request_id="second")
    drain(engine, clock, lambda r: 0.1 * r)
    restores = {e["request_id"]: e for e in engine.trace if e["kind"] == "restore"}
    reused = restores["second"]["reused_positions"]
    assert restores["first"]["reused_positions"] == 0 and reused > 0
    serving = engine.metrics()["serving"]
    assert serving["prefix_query_tokens"] == 9 + 11  # every prompt position at admission
    assert serving["prefix_hit_tokens"] == reused
    assert serving["prefix_hit_rate"] == reused / 20


def test_kv_usage_is_the_share_of_blocks_requests_hold() -> None:
    engine = Engine(config=EngineConfig(block_size=4, num_blocks=10))
    engine.submit(list(range(1, 10)), max_tokens=4)  # 9 + 1 rows stored: 3 blocks
    engine.step()
    assert engine.metrics()["serving"]["kv_usage"] == engine.metrics()["blocks"]["held"] / 10
    assert engine.metrics()["blocks"]["held"] == 3
    engine.run()
    assert engine.metrics()["serving"]["kv_usage"] == 0.0  # what stays is the cache's


def test_timing_follows_undo() -> None:
    engine, clock = one_round(3)

    def timing() -> dict:
        return {r["id"]: r for r in engine.snapshot()["requests"]}["a"]["timing"]

    before = timing()
    clock.now = 2.0
    engine.step()
    assert timing()["itl"] == [1.0]
    engine.undo()
    assert timing() == before
    # The same number of events again, at another time: the metrics see the new ones.
    clock.now = 7.0
    engine.step()
    assert timing()["itl"] == [6.0]
    drain(engine, clock, lambda r: 10.0 * r)
    assert engine.result("a").timing["finished"] == 30.0
    engine.undo()
    assert timing()["finished"] is None and timing()["itl"] == [6.0]


def test_a_rollback_takes_its_tokens_out_of_the_timing() -> None:
    engine, clock = one_round(3)
    drain(engine, clock, lambda r: 2.0 * r)  # rounds read 1.0, 4.0, 6.0
    assert engine.result("a").timing["itl"] == [3.0, 2.0]
    engine.rollback("a", 2)  # reopened with its first token, read in round 1
    timing = {r["id"]: r for r in engine.snapshot()["requests"]}["a"]["timing"]
    assert (timing["first_token"], timing["itl"], timing["finished"]) == (1.0, [], None)
    drain(engine, clock, lambda r: 2.0 * r)  # rounds 4 and 5 commit the two again
    timing = engine.result("a").timing
    assert (timing["itl"], timing["finished"], timing["e2e"]) == ([7.0, 2.0], 10.0, 10.0)


def test_the_synthetic_clock_adds_each_rounds_cost() -> None:
    clock = ManualClock(5.0)  # the injected clock stands still
    engine = Engine(clock=clock, config=EngineConfig(synthetic_clock=True))
    engine.submit([1, 2, 3, 4], max_tokens=2, request_id="a")
    engine.step()  # 4 prompt rows: 4 ms
    assert engine.now() == pytest.approx(5.004)
    engine.step()  # the pending row: 1 ms
    timing = engine.result("a").timing
    assert timing["first_token"] == 5.0 and timing["finished"] == pytest.approx(5.004)
    serving = engine.metrics()["serving"]
    assert serving["clock"] == "synthetic"
    assert serving["synthetic_seconds"] == pytest.approx(0.005)
    assert engine.snapshot()["clock"] == pytest.approx(5.005)
    engine.undo()
    assert engine.now() == pytest.approx(5.004)
    assert engine.metrics()["serving"]["synthetic_seconds"] == pytest.approx(0.004)
    assert Engine(clock=clock).metrics()["serving"]["clock"] == "injected"


def test_the_synthetic_clock_reads_the_cost_curve() -> None:
    clock = ManualClock(0.0)
    curve = ((1, 0.5), (8, 2.0))
    engine = Engine(clock=clock, config=EngineConfig(synthetic_clock=True, cost_curve=curve))
    engine.submit(list(range(1, 5)), max_tokens=2)  # 4 rows: the size-8 point, 2.0
    engine.submit(list(range(1, 21)), max_tokens=1)  # 20 rows: beyond 8, 2.0 * 20 / 8 = 5.0
    engine.step()
    assert engine.now() == pytest.approx(2.0 * 24 / 8)  # one batch of 24 rows
    engine.step()  # one pending row left: 0.5
    assert engine.now() == pytest.approx(6.5)


def test_bad_synthetic_clock_and_clock_failures_change_nothing() -> None:
    with pytest.raises(ValueError, match="synthetic_clock"):
        EngineConfig(synthetic_clock="yes")
    engine = Engine(clock=lambda: "broken")
    with pytest.raises(ValueError, match="clock"):
        engine.submit([1, 2], request_id="a")
    assert engine.request_ids() == [] and engine.trace == []
