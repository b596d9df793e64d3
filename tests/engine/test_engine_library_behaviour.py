"""What a user of core-deepinfer or vLLM expects of the library (issue #19): results in
submission order, a zero-token request that warms the cache, bounded recovery that reuses an
identical prompt, no stale state after the weights change, and a pool sized from memory."""

from __future__ import annotations

import pytest

from engine import (
    Engine,
    EngineConfig,
    RequestError,
    TinyModel,
    greedy_generate,
    make_draft,
    pool_blocks,
)
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    drain,
    events_of,
    restore_of,
)

# Seven prompts whose lengths and budgets make them finish out of submission order.
PROMPTS = [
    ([1, 2, 3], 9),
    ([4, 5], 1),
    ([6, 7, 8, 9, 10], 5),
    ([11], 3),
    ([12, 13, 14], 2),
    ([15, 16], 7),
    ([17, 18, 19, 20], 1),
]


# -- 1. run() returns results in submission order --------------------------------------------


@pytest.mark.parametrize("draft", [False, True])
def test_run_returns_results_in_submission_order_not_finish_order(draft: bool) -> None:
    target = TinyModel(seed=3)
    config = EngineConfig(max_active=7, max_batch_tokens=16, num_blocks=64, block_size=4)
    engine = Engine(target, make_draft(target) if draft else None, config=config)
    ids = [engine.submit(prompt, max_tokens=n) for prompt, n in PROMPTS]
    results = engine.run()
    finish_order = [e["request_id"] for e in engine.trace if e["kind"] == "finished"]
    assert finish_order != ids  # the workload does finish out of order
    assert [r.request_id for r in results] == ids
    for (prompt, _), result in zip(PROMPTS, results):  # so zip(prompts, run()) pairs them
        assert result.prompt == tuple(prompt)
        check_against_oracle(engine, result.request_id)
    assert engine.run() == []  # each result is delivered once


def test_run_orders_by_submission_across_calls_and_reopened_requests() -> None:
    engine = Engine(TinyModel(seed=3), None, config=EngineConfig(num_blocks=64, block_size=4))
    first = engine.submit([1, 2, 3], max_tokens=6)
    second = engine.submit([4, 5], max_tokens=1)
    engine.step()
    engine.step()  # `second` has finished, `first` has not
    delivered_by_generate = engine.generate([9, 9], max_tokens=2).request_id
    engine.rollback(second, 1)  # reopened: it will be delivered again, once
    late = engine.submit([7], max_tokens=2)
    results = engine.run()
    assert [r.request_id for r in results] == [first, second, late]
    assert delivered_by_generate not in {r.request_id for r in results}
    for result in results:
        check_against_oracle(engine, result.request_id)


# -- 2. a zero-token request warms the cache -------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
@pytest.mark.parametrize("draft", [False, True])
def test_a_zero_token_request_computes_and_publishes_its_prompt(
    block_size: int, draft: bool
) -> None:
    target = TinyModel(seed=4)
    config = EngineConfig(block_size=block_size, num_blocks=64)
    engine = Engine(
        target, make_draft(target) if draft else None, config=config, clock=ManualClock()
    )
    warm = engine.generate([1, 2, 3, 4], max_tokens=0)
    assert (warm.tokens, warm.finish_reason) == ((), "length")
    assert engine.metrics()["work"]["encoder_rows"] == 4  # its rows were computed
    check_against_oracle(engine, warm.request_id)
    rid = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=3)
    restore = restore_of(drain(engine), rid)
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 4)
    check_against_oracle(engine, rid)
    check_block_invariants(engine)


def test_a_zero_token_warm_up_is_restored_warm_after_its_hot_cursor_expires() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=4), None, config=EngineConfig(num_blocks=64), clock=clock)
    engine.generate([3, 1, 4, 1, 5], max_tokens=0)
    clock.advance(10.0)  # past state_ttl, inside prefix_ttl
    rid = engine.submit([3, 1, 4, 1, 5, 9, 2], max_tokens=4)
    restore = restore_of(drain(engine), rid)
    assert (restore["cache"], restore["reused_positions"]) == ("warm", 5)
    check_against_oracle(engine, rid)


def test_a_zero_token_request_of_a_cached_prompt_computes_one_row() -> None:
    engine = Engine(TinyModel(seed=4), None, config=EngineConfig(num_blocks=64))
    engine.generate([1, 2, 3, 4], max_tokens=0)
    again = engine.submit([1, 2, 3, 4], max_tokens=0)
    events = drain(engine)
    assert restore_of(events, again)["encoder_rows"] == 1  # the last position's logits
    assert engine.metrics()["work"]["encoder_rows"] == 5
    check_against_oracle(engine, again)


def test_a_draft_with_rows_of_its_own_leaves_a_zero_token_prompt_uncached() -> None:
    """Documented limit: the cache holds a prefix once every model that stores rows holds
    it, and a zero-token round computes only the target's."""
    target = TinyModel(seed=4)
    engine = Engine(target, TinyModel(seed=99, depth=1), config=EngineConfig(num_blocks=64))
    engine.generate([1, 2, 3, 4], max_tokens=0)
    rid = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=3)
    assert restore_of(drain(engine), rid)["cache"] == "cold"
    check_all_finished(engine)


# -- 3. bounded recovery reuses an identical prompt ------------------------------------------


BOUNDED_PROMPT = [2, 7, 1, 8, 2, 8]


def bounded_engine(mode: str, keep: int) -> tuple[Engine, ManualClock]:
    """A bounded-recovery engine that has already served BOUNDED_PROMPT once."""
    clock = ManualClock()
    config = EngineConfig(recovery_mode=mode, keep=keep, num_blocks=64, block_size=4)
    engine = Engine(TinyModel(seed=6), None, config=config, clock=clock)
    engine.generate(BOUNDED_PROMPT, max_tokens=3)
    return engine, clock


@pytest.mark.parametrize("mode", ["mask", "compact"])
def test_bounded_recovery_restores_an_identical_prompt_hot_then_warm(mode: str) -> None:
    engine, clock = bounded_engine(mode, keep=4)
    caches = []
    for move in (0.0, 10.0):  # hot first; then only the encoder prefix is alive
        clock.advance(move)
        rid = engine.submit(BOUNDED_PROMPT, max_tokens=3)
        restore = restore_of(drain(engine), rid)
        caches.append((restore["cache"], restore["reused_positions"], restore["recovery_mode"]))
    assert caches == [("hot", 5, mode), ("warm", 5, mode)]
    shorter = engine.submit(BOUNDED_PROMPT[:4], max_tokens=2)  # a prefix of the entry: usable
    assert restore_of(drain(engine), shorter)["reused_positions"] == 3


@pytest.mark.parametrize("mode", ["mask", "compact"])
def test_bounded_reuse_of_an_identical_prompt_is_exact_when_keep_covers_it(mode: str) -> None:
    engine, clock = bounded_engine(mode, keep=64)
    for move in (0.0, 10.0):
        clock.advance(move)
        rid = engine.submit(BOUNDED_PROMPT, max_tokens=4)
        assert restore_of(drain(engine), rid)["cache"] in ("hot", "warm")
        check_against_oracle(engine, rid)


# -- 4. a model whose weights changed is never served stale state ----------------------------


def _replace_weights(model: TinyModel, seed: int) -> None:
    model.weights = TinyModel(
        vocab_size=model.vocab_size, width=model.width, depth=model.depth, seed=seed
    ).weights


def test_a_running_request_fails_when_the_target_weights_change() -> None:
    target = TinyModel(seed=8)
    engine = Engine(target, None, config=EngineConfig(num_blocks=64), clock=ManualClock())
    running = engine.submit([1, 2, 3], max_tokens=6)
    engine.step()
    waiting = engine.submit([1, 2, 3, 4], max_tokens=3)  # submitted, nothing computed yet
    _replace_weights(target, seed=9)
    events = engine.step()
    failed = engine.result(running)
    assert failed.finish_reason == "error"
    assert "target model's weights changed" in (failed.error or "")
    old_model = greedy_generate(TinyModel(seed=8), [1, 2, 3], max_tokens=len(failed.tokens))
    assert failed.tokens == old_model.tokens  # what the old weights committed, kept as it was
    drain(engine)
    check_against_oracle(engine, waiting)  # the new model's oracle (engine.target is new)
    assert any(e["kind"] == "finished" and e["request_id"] == running for e in events)
    with pytest.raises(RequestError, match="weights changed"):
        engine.run()


def test_cached_prefixes_of_the_old_weights_are_dropped_never_restored() -> None:
    target = TinyModel(seed=8)
    engine = Engine(target, None, config=EngineConfig(num_blocks=64), clock=ManualClock())
    engine.generate([5, 6, 7, 8], max_tokens=2)
    cached = len(engine.snapshot()["cache"])
    assert cached > 0
    _replace_weights(target, seed=10)
    rid = engine.submit([5, 6, 7, 8, 9], max_tokens=3)
    events = drain(engine)
    assert [e["reason"] for e in events_of(events, "evict")] == ["model changed"] * cached
    assert restore_of(events, rid)["cache"] == "cold"
    check_against_oracle(engine, rid)
    check_block_invariants(engine)


def test_undo_past_a_weight_change_fails_the_restored_requests_again() -> None:
    target = TinyModel(seed=8)
    engine = Engine(target, None, config=EngineConfig(num_blocks=64), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=6)
    engine.step()
    _replace_weights(target, seed=11)
    engine.step()
    assert engine.result(rid).finish_reason == "error"
    engine.undo()  # the request is running again, on KV of the old weights
    engine.step()
    assert engine.result(rid).finish_reason == "error"


def test_a_replaced_draft_fails_running_requests_and_later_ones_stay_exact() -> None:
    target = TinyModel(seed=8)
    draft = make_draft(target, seed=9)
    engine = Engine(target, draft, config=EngineConfig(num_blocks=64), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=8)
    engine.step()
    draft.weights = make_draft(target, seed=12).weights
    engine.step()
    assert "draft model's weights changed" in (engine.result(rid).error or "")
    later = engine.submit([1, 2, 3], max_tokens=8)
    drain(engine)
    check_against_oracle(engine, later)


def test_identical_weights_put_back_are_no_change() -> None:
    target = TinyModel(seed=8)
    engine = Engine(target, None, config=EngineConfig(num_blocks=64))
    rid = engine.submit([1, 2, 3], max_tokens=4)
    engine.step()
    _replace_weights(target, seed=8)  # new arrays, same values: the same identity
    drain(engine)
    check_against_oracle(engine, rid)


# -- 5. a default pool that fits real prompts ------------------------------------------------


def test_the_default_pool_holds_sixteen_thousand_positions_of_the_default_model() -> None:
    engine = Engine()
    pool = engine.snapshot()["pool"]
    assert pool["num_blocks"] * pool["block_size"] >= 16_384
    assert pool["num_blocks"] == pool_blocks(EngineConfig(), engine.target)
    engine.submit(list(range(32)) * 128, max_tokens=32)  # 4,096 + 32 positions: accepted


def test_the_default_pool_follows_the_memory_budget_and_the_stored_models() -> None:
    target = TinyModel()
    base = pool_blocks(EngineConfig(), target)
    assert pool_blocks(EngineConfig(kv_cache_memory_mib=64), target) in (2 * base, 2 * base + 1)
    # An early-exit draft reads the target's rows; an independent one stores its own.
    assert pool_blocks(EngineConfig(), target, make_draft(target)) == base
    assert pool_blocks(EngineConfig(), target, TinyModel(seed=5)) in (base // 2, base // 2 + 1)
    assert pool_blocks(EngineConfig(num_blocks=7), target, TinyModel(seed=5)) == 7


@pytest.mark.parametrize(
    ("config", "setting"),
    [(EngineConfig(num_blocks=4), "num_blocks"), (EngineConfig(kv_cache_memory_mib=0.1), "kv")],
)
def test_a_prompt_too_long_for_the_pool_names_the_setting_to_raise(
    config: EngineConfig, setting: str
) -> None:
    engine = Engine(TinyModel(), None, config=config)
    expected = "num_blocks" if setting == "num_blocks" else "kv_cache_memory_mib"
    with pytest.raises(ValueError, match=f"raise {expected}"):
        engine.submit([1] * 4096, max_tokens=32)
    assert engine.snapshot()["requests"] == []  # nothing changed


def test_greedy_generate_is_the_oracle_the_zero_token_result_is_checked_against() -> None:
    target = TinyModel(seed=4)
    oracle = greedy_generate(target, [1, 2, 3, 4], max_tokens=0)
    assert oracle.tokens == ()
    engine = Engine(target, None, config=EngineConfig(num_blocks=16))
    result = engine.generate([1, 2, 3, 4], max_tokens=0)
    error = engine.committed_state(result.request_id).max_error(oracle.state)
    assert error < 1e-10
