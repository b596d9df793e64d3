"""Boundaries and bookkeeping of the pool, the cache, drafting limits, pool pressure, rollback
and undo: each test fails if one comparison, cap or reset in the engine is off by one or dropped."""

from __future__ import annotations

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from engine.cache import PrefixCache
from engine.kv import BlockPool
from engine.rows import Joined, Rows
from engine.speculation import DraftTree, choose_budget, expand
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    drain,
    events_of,
    request_view,
    restore_of,
)


def small_pool(num_blocks: int = 4, block_size: int = 4) -> BlockPool:
    return BlockPool({"target": TinyModel()}, num_blocks=num_blocks, block_size=block_size)


# -- block pool ------------------------------------------------------------------------------------


def test_a_reused_block_starts_unsealed_so_its_sole_owner_writes_in_place() -> None:
    pool = small_pool()
    (block,) = pool.allocate(1)
    pool.seal([block], 0, 4)
    pool.release([block])
    (again,) = pool.allocate(1)  # lowest id first: the same block comes back
    assert again == block
    assert pool.blocks_to_copy([again], {"target": 0}) == []


def test_a_reused_block_forgets_its_previous_prefix_hash() -> None:
    pool = small_pool()
    (block,) = pool.allocate(1)
    pool.block_hash[block] = "cafe"
    pool.release([block])
    (again,) = pool.allocate(1)
    assert again == block
    assert pool.block_hash[again] is None


def test_releasing_a_block_more_often_than_it_was_held_raises() -> None:
    pool = small_pool()
    (block,) = pool.allocate(1)
    pool.release([block])
    with pytest.raises(AssertionError, match="released more often than held"):
        pool.release([block])


def test_sealing_part_of_a_block_protects_those_rows_from_in_place_writes() -> None:
    pool = small_pool()
    (block,) = pool.allocate(1)
    pool.seal([block], 0, 2)  # positions 0 and 1 of a 4-slot block are committed
    assert pool.blocks_to_copy([block], {"target": 1}) == [0]  # would overwrite position 1
    assert pool.blocks_to_copy([block], {"target": 2}) == []  # writes only after them


def test_a_later_shorter_seal_never_unseals_rows() -> None:
    pool = small_pool()
    (block,) = pool.allocate(1)
    pool.seal([block], 0, 3)
    pool.seal([block], 0, 1)
    assert pool.blocks_to_copy([block], {"target": 1}) == [0]


def test_a_lagging_models_sealed_rows_are_checked_from_its_own_first_position() -> None:
    models = {"target": TinyModel(seed=1), "draft": TinyModel(seed=2, depth=1)}
    pool = BlockPool(models, num_blocks=4, block_size=4)
    table = pool.allocate(2)
    pool.seal(table, 0, 4, role="draft")  # the draft committed positions 0..3
    pool.seal(table, 0, 5)  # the target committed positions 0..4
    # The draft rewrites from position 2, inside the first block: that block must be copied.
    assert pool.blocks_to_copy(table, {"target": 5, "draft": 2}) == [0]


def test_unsealed_blocks_held_once_never_need_a_copy() -> None:
    pool = small_pool()
    table = pool.allocate(3)
    assert pool.blocks_to_copy(table, {"target": 0}) == []
    assert pool.blocks_to_copy(table, {"target": 6}) == []


def test_give_back_leaves_held_blocks_allocated() -> None:
    pool = small_pool(num_blocks=2)
    (held,) = pool.allocate(1)
    pool.give_back([held])
    assert pool.free_count() == 1
    assert pool.allocate(1) != [held]


# -- prefix cache ----------------------------------------------------------------------------------

TTLS = (1.0, 5.0)  # hot for 1 s, warm for 5 s


def test_refreshing_an_entry_makes_it_the_most_recently_used() -> None:
    cache = PrefixCache(capacity=2)
    cache.publish("k", (1, 1), [0], now=0.0, ttls=TTLS)
    cache.publish("k", (2, 2), [1], now=0.0, ttls=TTLS)
    assert cache.publish("k", (1, 1), [0], now=0.5, ttls=TTLS) == (None, None)  # a refresh
    entry, evicted = cache.publish("k", (3, 3), [2], now=0.5, ttls=TTLS)
    assert entry is not None and evicted is not None
    assert evicted.tokens == (2, 2)
    assert [tokens for (_, tokens), _ in cache.items()] == [(1, 1), (3, 3)]


def test_a_lookup_never_uses_an_entry_at_its_warm_expiry() -> None:
    cache = PrefixCache(capacity=4)
    cache.publish("k", (1, 2, 3), [0], now=0.0, ttls=TTLS)
    assert cache.lookup("k", (1, 2, 3), now=4.999, exact=True).cache == "warm"
    found = cache.lookup("k", (1, 2, 3), now=5.0, exact=True)  # what expire(5.0) drops
    assert (found.cache, found.reused, found.entry) == ("cold", 0, None)


def test_bounded_recovery_reuses_only_entries_whose_whole_prefix_matches() -> None:
    config = EngineConfig(recovery_mode="mask", keep=64, block_size=4)
    engine = Engine(TinyModel(seed=3), None, config=config, clock=ManualClock())
    engine.generate([1, 2, 3, 4, 5, 6], max_tokens=2)  # publishes [1..6] and [1..6, g1]
    partial = engine.submit([1, 2, 3, 9, 9], max_tokens=2)  # shares 3 positions with both
    restore = restore_of(drain(engine), partial)
    assert (restore["cache"], restore["reused_positions"]) == ("cold", 0)
    whole = engine.submit([1, 2, 3, 4, 5, 6, 7, 7], max_tokens=2)  # [1..6] is a prefix
    restore = restore_of(drain(engine), whole)
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 6)
    check_against_oracle(engine, whole)


def test_a_lookup_hit_makes_its_entry_the_most_recently_used() -> None:
    cache = PrefixCache(capacity=2)
    cache.publish("k", (1, 1), [0], now=0.0, ttls=TTLS)
    cache.publish("k", (2, 2), [1], now=0.0, ttls=TTLS)
    assert cache.lookup("k", (1, 1, 5), now=0.5, exact=True).reused == 2
    _, evicted = cache.publish("k", (3, 3), [2], now=0.5, ttls=TTLS)
    assert evicted is not None and evicted.tokens == (2, 2)


def test_a_prompt_sharing_no_token_with_live_entries_restores_cold() -> None:
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=ManualClock())
    engine.generate([1, 2, 3], max_tokens=2)
    other = engine.submit([7, 8, 9], max_tokens=2)
    restore = restore_of(drain(engine), other)
    assert (restore["cache"], restore["reused_positions"]) == ("cold", 0)
    assert engine.metrics()["cache"] == {"hot": 0, "warm": 0, "cold": 2}


# -- engine: admission, rollback -------------------------------------------------------------------


def test_a_request_for_zero_tokens_finishes_at_admission_without_model_work() -> None:
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)  # a prefix to restore from
    work = dict(engine.metrics()["work"])
    for prompt, cache in (([5, 6, 7], "cold"), ([1, 2, 3, 4, 9], "hot")):
        rid = engine.submit(prompt, max_tokens=0)
        events = engine.step()
        assert [e["kind"] for e in events if e["request_id"] == rid] == ["restore", "finished"]
        restore = restore_of(events, rid)
        assert restore["cache"] == cache
        # The lookup happened; no row was computed for it.
        assert (restore["encoder_rows"], restore["consumer_rows"]) == (0, 0)
        assert engine.result(rid).tokens == ()
        check_against_oracle(engine, rid)
    assert engine.metrics()["work"] == work


@pytest.mark.parametrize("prompt", [[5, 6, 7], [1, 2, 3, 4, 9], [1, 2, 3, 4]])
def test_a_restore_computes_the_positions_the_cache_did_not_cover(prompt: list[int]) -> None:
    """What the debugger shows as "computed": the encoder rows, one per uncovered position."""
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)
    rid = engine.submit(prompt, max_tokens=2)
    restore = restore_of(engine.step(), rid)
    assert restore["encoder_rows"] == restore["suffix_positions"] > 0
    assert restore["reused_positions"] + restore["suffix_positions"] == len(prompt)


def test_a_finished_request_reopened_by_rollback_forgets_its_old_restore() -> None:
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)
    rid = engine.submit([1, 2, 3, 4, 9], max_tokens=3)
    drain(engine)
    assert request_view(engine.snapshot(), rid)["restore"]["cache"] == "hot"
    engine.rollback(rid, 2)
    view = request_view(engine.snapshot(), rid)
    assert view["status"] == "queued" and view["blocks"] == [] and view["restore"] is None
    restore = restore_of(engine.step(), rid)  # admitted again: a restore of its own
    shown = request_view(engine.snapshot(), rid)["restore"]
    assert shown == {k: v for k, v in restore.items() if k not in ("kind", "request_id", "tick")}
    drain(engine)
    check_against_oracle(engine, rid)


def full_block_hashes(engine: Engine, request_id: str) -> dict[int, str | None]:
    """Prefix hash of every completely committed block of a request's table, by index."""
    view = request_view(engine.snapshot(), request_id)
    return {b["index"]: b["hash"] for b in view["blocks"] if None not in b["slots"]}


def test_blocks_refilled_after_a_rollback_get_the_same_prefix_hashes() -> None:
    config = EngineConfig(block_size=2, undo_depth=0)
    reference = Engine(TinyModel(seed=4), None, config=config, clock=ManualClock())
    expected: dict[int, str | None] = {}
    ref = reference.submit([1, 2, 3], max_tokens=9)
    for _ in range(8):
        reference.step()
        expected.update(full_block_hashes(reference, ref))
    assert len(expected) >= 5 and None not in expected.values()

    engine = Engine(TinyModel(seed=4), None, config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=9)
    for _ in range(6):
        engine.step()
    engine.rollback(rid, 5)  # frees the last blocks; the next rounds refill new ones
    seen: dict[int, str | None] = {}
    for _ in range(7):
        engine.step()
        seen.update(full_block_hashes(engine, rid))
    assert seen == {index: expected[index] for index in seen}
    assert len(seen) >= 5


# -- engine: drafting limits -----------------------------------------------------------------------


@pytest.mark.parametrize("branching", [1, 3])
@pytest.mark.parametrize(("requests", "max_batch_tokens"), [(1, 3), (2, 6), (3, 7)])
def test_draft_trees_grow_no_more_than_the_round_can_verify(
    requests: int, max_batch_tokens: int, branching: int
) -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, depth=target.depth, noise=0.0)
    config = EngineConfig(
        max_batch_tokens=max_batch_tokens,
        draft_width=8,
        draft_branching=branching,
        max_draft_nodes=16,
    )
    engine = Engine(target, draft, config=config, clock=ManualClock())
    for index in range(requests):
        engine.submit([1 + index, 2, 3], max_tokens=12)
    drafted = 0
    while not engine.idle:
        events = engine.step()
        budgets = events_of(events, "budget")
        if not budgets:
            continue
        # Each request's fair share of the round's extra (non-main) positions.
        share = max(1, max_batch_tokens // len(budgets[0]["requests"]) - 1)
        for draft_event in events_of(events, "draft"):
            nodes = draft_event["nodes"][1:]
            if not nodes:
                continue
            drafted += 1
            assert max(n["depth"] for n in nodes) <= share
            assert len(nodes) <= 2 * share
    assert drafted > 0


@pytest.mark.parametrize("branching", [1, 2])
def test_drafts_never_reach_past_the_tokens_a_request_may_still_generate(branching: int) -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, depth=target.depth, noise=0.0)  # accepts everything it drafts
    config = EngineConfig(draft_width=6, draft_branching=branching, max_draft_nodes=12)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    ids = [engine.submit([4, 1, 3], max_tokens=4), engine.submit([2, 6], max_tokens=2)]
    depths = []
    while not engine.idle:
        remaining = {
            view["id"]: view["max_tokens"] - len(view["generated"])
            for view in engine.snapshot()["requests"]
        }
        for draft_event in events_of(engine.step(), "draft"):
            deepest = max(n["depth"] for n in draft_event["nodes"])
            # The round's bonus token counts too: only remaining - 1 drafts can be used.
            left = remaining[draft_event["request_id"]]
            assert deepest <= left - 1, (draft_event["request_id"], deepest, left)
            depths.append(deepest)
    assert depths and max(depths) >= 2
    for rid in ids:
        check_against_oracle(engine, rid)


# -- engine: pool pressure -------------------------------------------------------------------------


def test_under_pool_pressure_the_oldest_request_is_served_first_and_never_preempted() -> None:
    config = EngineConfig(block_size=2, num_blocks=4, max_active=2)
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    oldest = engine.submit([1, 2, 3], max_tokens=5)
    newer = engine.submit([5, 6, 7], max_tokens=5)
    events = drain(engine)
    victims = [e["request_id"] for e in events_of(events, "preempt")]
    assert victims and set(victims) == {newer}
    assert [e["request_id"] for e in events_of(events, "finished")] == [oldest, newer]
    check_against_oracle(engine, oldest)
    check_against_oracle(engine, newer)


def test_eviction_for_space_keeps_going_past_entries_whose_blocks_others_still_hold() -> None:
    config = EngineConfig(block_size=2, num_blocks=9, max_active=2, undo_depth=0)
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=1)
    engine.submit([1, 2, 3, 4, 5], max_tokens=8)  # shares blocks with the first entries
    engine.step()
    engine.generate([8, 8, 8, 8], max_tokens=1)
    engine.run()  # the longer request finishes too
    snapshot = engine.snapshot()
    assert snapshot["metrics"]["blocks"]["free"] == 0
    # The least recently used entries share their blocks with a newer, longer entry.
    assert snapshot["cache"][0]["tokens"] == [1, 2, 3, 4]
    late = engine.submit([7, 7, 7], max_tokens=3)  # needs 2 blocks for its prompt
    events = engine.step()
    assert [e["request_id"] for e in events_of(events, "deferred")] == [late]
    # The deferring round freed enough for the next one ("usable next round").
    assert engine.snapshot()["metrics"]["blocks"]["free"] >= 2
    events = engine.step()
    assert [e["request_id"] for e in events_of(events, "commit")] == [late]
    drain(engine)
    check_against_oracle(engine, late)


@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_a_running_request_holds_exactly_the_blocks_of_its_committed_positions(
    block_size: int,
) -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, seed=2)
    config = EngineConfig(block_size=block_size, draft_width=3, draft_branching=2)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    for prompt in ([1, 2, 3], [4, 5, 6, 7], [1, 2, 3, 9]):
        engine.submit(prompt, max_tokens=9)
    checked = 0
    while not engine.idle:
        engine.step()
        for view in engine.snapshot()["requests"]:
            if view["status"] == "finished" or not view["blocks"]:
                continue
            committed = view["committed_positions"]
            assert len(view["blocks"]) == -(-committed // block_size), view["id"]
            checked += 1
    assert checked > 0


# -- engine: publication, hashes, rollback and undo ------------------------------------------------


def test_the_cache_never_holds_an_entry_without_positions() -> None:
    target = TinyModel(seed=3)
    independent = TinyModel(seed=99, depth=1)  # keeps its own rows, which lag at first
    engine = Engine(target, independent, config=EngineConfig(block_size=2), clock=ManualClock())
    for prompt in ([1, 2, 3], [4, 4], [6]):
        engine.submit(prompt, max_tokens=3)
    publishes = events_of(drain(engine), "publish")
    assert publishes and all(p["positions"] > 0 and p["blocks"] for p in publishes)
    assert all(entry["tokens"] for entry in engine.snapshot()["cache"])


def test_a_warm_restore_republishes_nothing_as_hot_before_its_consumers_are_recomputed() -> None:
    clock = ManualClock()
    target = TinyModel(seed=3)
    independent = TinyModel(seed=7, depth=1)  # keeps its own rows in the blocks
    engine = Engine(target, independent, config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2, 3, 4, 5, 6], max_tokens=3)
    clock.now = 10.0  # hot cursors expired at 3s; encoder prefixes live until 100s
    warm = engine.submit([1, 2, 3, 4, 5, 6, 7, 8], max_tokens=6)
    engine.step()  # the target replays its consumers; the draft has not run yet
    assert restore_of(engine.trace, warm)["cache"] == "warm"
    probe = engine.submit([1, 2, 3, 4, 5, 6, 9, 9], max_tokens=2)
    events = drain(engine)
    restore = restore_of(events, probe)
    assert (restore["cache"], restore["reused_positions"]) == ("warm", 6)
    check_against_oracle(engine, probe)


def test_cancelling_a_running_request_publishes_nothing_more() -> None:
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=8)
    for _ in range(4):
        engine.step()
    cached, start = engine.snapshot()["cache"], len(engine.trace)
    assert engine.cancel(rid)
    assert engine.snapshot()["cache"] == cached
    assert not events_of(engine.trace[start:], "publish")


def test_expired_entries_are_not_counted_as_evictions() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(prefix_ttl=5.0), clock=clock)
    engine.generate([1, 2, 3], max_tokens=2)
    clock.now = 6.0
    events = engine.step()
    expired = events_of(events, "evict")
    assert expired and all(e["reason"] == "expired" for e in expired)
    assert engine.snapshot()["cache"] == []
    assert engine.metrics()["requests"]["evictions"] == 0


def test_a_block_filled_over_several_rounds_gets_the_hash_of_its_full_prefix() -> None:
    config = EngineConfig(block_size=4)
    slow = Engine(TinyModel(seed=4), None, config=config, clock=ManualClock())
    rid = slow.submit([1, 2, 3], max_tokens=8)  # fills its blocks one token per round
    seen: dict[int, str | None] = {}
    for _ in range(7):
        slow.step()
        view = request_view(slow.snapshot(), rid)
        for block in view["blocks"]:
            if None in block["slots"]:
                assert block["hash"] is None, block  # not full: no prefix hash yet
        seen.update(full_block_hashes(slow, rid))
    view = request_view(slow.snapshot(), rid)
    tokens = view["prompt"] + view["generated"]
    fast = Engine(TinyModel(seed=4), None, config=config, clock=ManualClock())
    whole = fast.submit(tokens, max_tokens=2)  # the same blocks, full after one round
    fast.step()
    expected = full_block_hashes(fast, whole)
    assert len(seen) == 2 and seen == {index: expected[index] for index in seen}


def test_a_rollback_clears_the_rolled_back_rounds_tree_and_commit() -> None:
    target = TinyModel(seed=5)
    engine = Engine(target, make_draft(target, seed=2), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=10)
    for _ in range(3):
        engine.step()
    view = request_view(engine.snapshot(), rid)
    assert view["tree"] is not None and view["last_commit"] is not None
    engine.rollback(rid, 2)
    view = request_view(engine.snapshot(), rid)
    assert (view["tree"], view["last_commit"]) == (None, None)


def test_blocks_released_after_undoing_the_only_recorded_round_are_free_at_once() -> None:
    config = EngineConfig(block_size=2, undo_depth=1, cache_capacity=1)
    engine = Engine(TinyModel(seed=2), None, config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=6)
    for _ in range(4):
        engine.step()
    engine.undo()  # back to after round 3: the table has grown past the cached prefix
    assert engine.undo_available == 0
    engine.cancel(rid)  # no history is left that could need its rows
    blocks = engine.snapshot()["metrics"]["blocks"]
    assert blocks["retained"] == 0
    assert blocks["free"] + blocks["cached"] == blocks["total"]


# -- cost curves, draft trees and budgets ----------------------------------------------------------


def test_a_cost_curve_caps_the_requests_admitted_per_round_at_its_largest_size() -> None:
    config = EngineConfig(max_active=4, cost_curve=((1, 1.0), (2, 1.5)))
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    ids = [engine.submit([1 + index, 2], max_tokens=2) for index in range(4)]
    events = drain(engine)
    budgets = events_of(events, "budget")
    assert budgets and max(len(b["requests"]) for b in budgets) == 2
    for rid in ids:
        check_against_oracle(engine, rid)


@pytest.mark.parametrize("top", [[[5]], [[5, 6]]])
def test_expanding_a_tree_at_its_node_cap_adds_nothing(top: list[list[int]]) -> None:
    tree = DraftTree.rooted(1)
    expand(tree, [0], [[0.9] * len(top[0])], top, 1)  # one node: the cap
    assert len(tree) == 2
    assert expand(tree, [1], [[0.8] * len(top[0])], top, 1) == []
    assert len(tree) == 2


def test_a_cost_curve_tie_keeps_the_smaller_verification_total() -> None:
    # Verifying the 0.5-probable node buys 1.5 expected tokens for 1.5x the cost: no gain.
    curve = ((1, 1.0), (2, 1.5))
    budget = choose_budget([[0.5]], [[0.5]], max_batch_tokens=2, cost_curve=curve)
    assert (budget.total, budget.per_request, budget.estimated_cost) == (1, (1,), 1.0)
    better = choose_budget([[0.9]], [[0.9]], max_batch_tokens=2, cost_curve=curve)
    assert (better.total, better.per_request) == (2, (2,))


def test_a_cost_curve_point_at_exactly_max_batch_tokens_is_kept() -> None:
    config = EngineConfig(max_batch_tokens=4, cost_curve=((1, 1.0), (4, 2.0), (8, 3.0)))
    assert config.cost_curve == ((1, 1.0), (4, 2.0))
    assert EngineConfig(max_batch_tokens=4, cost_curve=((4, 2.0),)).cost_curve == ((4, 2.0),)


def test_the_expected_tokens_count_the_main_positions_plus_the_extra_nodes() -> None:
    budget = choose_budget([[0.9, 0.5, 0.2]], [[]], max_batch_tokens=3, cost_curve=None)
    assert (budget.total, budget.per_request) == (3, (3,))
    assert budget.expected_tokens == pytest.approx(1 + 0.9 + 0.5)


def test_last_rounds_confidences_stand_in_for_at_most_this_rounds_node_count() -> None:
    # Request 0 drafted one node now (0.1) after two confident ones last round; request 1 has
    # one node (0.5) and no history. Only one of request 0's old values may be used.
    budget = choose_budget([[0.1], [0.5]], [[0.9, 0.9], []], max_batch_tokens=4, cost_curve=None)
    assert budget.total == 4
    assert budget.expected_tokens == pytest.approx(2 + 0.9 + 0.5)


# -- rows ------------------------------------------------------------------------------------------


def test_joined_rows_read_by_index_match_the_concatenated_rows() -> None:
    layout = TinyModel().layout
    first = Rows(np.arange(2 * layout.size, dtype=float).reshape(2, -1), layout)
    second = Rows(-np.arange(3 * layout.size, dtype=float).reshape(3, -1) - 1, layout)
    joined = Joined(first, second)
    whole = np.concatenate([first.data, second.data])
    rows = np.array([0, 1, 2, 4])  # row 2 is the first computed row
    np.testing.assert_array_equal(
        joined.columns(layout.source, rows), whole[rows][:, layout.source]
    )
    np.testing.assert_array_equal(joined.columns(layout.source), whole[:, layout.source])


# -- warm restores and preemption ------------------------------------------------------------------


def draft_trees(engine: Engine, request_id: str) -> list[list[tuple[int, int, float]]]:
    return [
        [(n["parent"], n["token"], n["path_prob"]) for n in event["nodes"]]
        for event in events_of(engine.trace, "draft")
        if event["request_id"] == request_id
    ]


@pytest.mark.parametrize("branching", [1, 2])
def test_a_warm_restored_draft_proposes_what_a_cold_one_proposes(branching: int) -> None:
    def build(clock: ManualClock) -> Engine:
        config = EngineConfig(block_size=2, draft_width=4, draft_branching=branching)
        return Engine(TinyModel(seed=3), TinyModel(seed=7, depth=1), config=config, clock=clock)

    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    clock = ManualClock()
    engine = build(clock)
    engine.generate(prompt[:6], max_tokens=3)
    clock.now = 10.0  # warm: the draft replays its consumers over the cached encoder rows
    warm = engine.submit(prompt, max_tokens=6)
    drain(engine)
    assert restore_of(engine.trace, warm)["cache"] == "warm"
    cold_engine = build(ManualClock())
    cold = cold_engine.submit(prompt, max_tokens=6)
    drain(cold_engine)
    warm_trees, cold_trees = draft_trees(engine, warm), draft_trees(cold_engine, cold)
    assert len(warm_trees) == len(cold_trees) > 0
    assert max(len(tree) for tree in warm_trees) > 2  # some tree is deeper than one level
    for got, want in zip(warm_trees, cold_trees):
        assert [node[:2] for node in got] == [node[:2] for node in want]
        assert [node[2] for node in got] == pytest.approx([node[2] for node in want])


def test_blocks_copied_for_a_warm_restore_are_not_copied_again() -> None:
    clock = ManualClock()
    independent = TinyModel(seed=7, depth=1)  # keeps its own rows in the blocks
    engine = Engine(TinyModel(seed=3), independent, config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2, 3, 4, 5, 6], max_tokens=3)
    clock.now = 10.0
    rid = engine.submit([1, 2, 3, 4, 5, 6, 7, 8], max_tokens=6)
    engine.step()  # replays the consumers into private copies of the cached blocks
    first = [b["id"] for b in request_view(engine.snapshot(), rid)["blocks"]][:3]
    cached = {b for entry in engine.snapshot()["cache"] for b in entry["blocks"]}
    assert not set(first) & cached  # copies, not the cached originals
    engine.step()  # the draft catches up; the copies are this request's alone
    again = [b["id"] for b in request_view(engine.snapshot(), rid)["blocks"]][:3]
    assert again == first


def test_a_preempted_request_hashes_its_refilled_blocks_like_an_unpressured_one() -> None:
    def build(num_blocks: int) -> Engine:
        config = EngineConfig(block_size=2, num_blocks=num_blocks, max_active=2)
        return Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())

    reference = build(64)
    alone = reference.submit([5, 6, 7], max_tokens=5)
    expected: dict[int, str | None] = {}
    while not reference.idle:
        reference.step()
        if request_view(reference.snapshot(), alone)["status"] != "finished":
            expected.update(full_block_hashes(reference, alone))

    engine = build(4)
    engine.submit([1, 2, 3], max_tokens=5)
    newer = engine.submit([5, 6, 7], max_tokens=5)
    seen: dict[int, str | None] = {}
    preempted = False
    while not engine.idle:
        preempted |= bool(events_of(engine.step(), "preempt"))
        if preempted and request_view(engine.snapshot(), newer)["status"] != "finished":
            seen.update(full_block_hashes(engine, newer))
    assert preempted and len(seen) >= 2
    assert seen == {index: expected[index] for index in seen}


def test_after_a_rollback_into_a_block_the_request_shows_no_hash_for_its_partial_part() -> None:
    config = EngineConfig(block_size=2)
    engine = Engine(TinyModel(seed=4), None, config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=9)
    for _ in range(5):
        engine.step()
    engine.rollback(rid, 2)
    snapshot = engine.snapshot()
    blocks = request_view(snapshot, rid)["blocks"]
    partial = [b for b in blocks if None in b["slots"]]
    assert partial and all(b["hash"] is None for b in partial)
    assert all(b["hash"] is not None for b in blocks if None not in b["slots"])
    # The pool still hashes the block by what it holds (its old, full content: undo reads it).
    pool = {b["id"]: b for b in snapshot["pool"]["blocks"]}
    assert any(pool[b["id"]]["hash"] is not None for b in partial)


def test_a_block_copied_from_the_cache_and_written_differently_gets_its_own_hash() -> None:
    engine = Engine(TinyModel(seed=4), None, config=EngineConfig(block_size=4), clock=ManualClock())
    first = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=2)
    engine.step()
    shown = {b["index"]: b["hash"] for b in request_view(engine.snapshot(), first)["blocks"]}
    drain(engine)
    # Shares [1, 2, 3] with the cached prefix: its first block is a copy, then holds 9.
    second = engine.submit([1, 2, 3, 9, 10, 11], max_tokens=2)
    restore = restore_of(engine.step(), second)
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 3)
    block = request_view(engine.snapshot(), second)["blocks"][0]
    assert block["slots"] == [1, 2, 3, 9]
    assert block["hash"] is not None and block["hash"] != shown[0]
    drain(engine)
    check_against_oracle(engine, second)
