"""Cache policies: vLLM's automatic prefix caching ("blocks") and SGLang's radix tree ("radix")
behave as their designs describe (exactness over every policy: test_cache_policies_exactness).

The expectations come from the designs (vLLM's prefix caching design document, SGLang's radix
cache), not from this engine: blocks freed to the tail of one free queue (a request's in
reverse), allocation from its head, eviction of a cached block when it is taken there, hits
that take blocks out of the queue; a radix tree split where a match ends inside a node,
least recently used leaves evicted first, a parent evicted once its last child is.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine import Engine, EngineConfig, TinyModel
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    drain,
    events_of,
    request_view,
    restore_of,
)
from tests.engine.policy_checks import radix_nodes


def engine_with(policy: str, clock: ManualClock | None = None, **config: Any) -> Engine:
    settings: dict[str, Any] = dict(block_size=2, num_blocks=8, undo_depth=0) | config
    return Engine(
        TinyModel(seed=3),
        config=EngineConfig(cache_policy=policy, **settings),
        clock=clock or ManualClock(),
    )


def run_one(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[str, list[dict]]:
    request_id = engine.submit(prompt, max_tokens=max_tokens)
    events = drain(engine)
    check_all_finished(engine)
    return request_id, events


# -- configuration ----------------------------------------------------------------------------


def test_an_unknown_cache_policy_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="cache_policy"):
        EngineConfig(cache_policy="lru")
    with pytest.raises(ValueError, match="cache_policy"):
        EngineConfig.from_dict({"cache_policy": 3})
    # Blocks are reused at any block boundary: only exact rows allow that.
    with pytest.raises(ValueError, match="cache_policy 'radix' needs recovery_mode 'exact'"):
        EngineConfig(cache_policy="radix", recovery_mode="mask")
    config = EngineConfig(cache_policy="blocks")
    assert EngineConfig.from_dict(config.to_dict()) == config
    assert EngineConfig().cache_policy == "ttl"


# -- "blocks": vLLM's automatic prefix caching ------------------------------------------------

PROMPT = [1, 2, 3, 4, 5]  # two full blocks of 2 before its last token


def test_blocks_are_freed_to_the_queue_tail_in_reverse_and_taken_from_its_head() -> None:
    engine = engine_with("blocks")
    assert engine.snapshot()["pool"]["free_queue"] == list(range(8))
    # Five prompt rows and one generated token: three blocks, taken from the head in order.
    run_one(engine, PROMPT, 1)
    assert engine.snapshot()["pool"]["free_queue"] == [3, 4, 5, 6, 7, 2, 1, 0]
    # An unrelated prompt of three tokens takes the two blocks at the head.
    other, events = run_one(engine, [9, 9, 9], 1)
    assert restore_of(events, other)["hit_blocks"] == []
    assert engine.snapshot()["pool"]["free_queue"] == [5, 6, 7, 2, 1, 0, 4, 3]


def test_a_hit_touches_its_blocks_out_of_the_free_queue() -> None:
    engine = engine_with("blocks")
    run_one(engine, PROMPT, 1)
    again = engine.submit(PROMPT, max_tokens=3)
    events = engine.step()
    restore = restore_of(events, again)
    assert restore["hit_blocks"] == [0, 1] and restore["cache"] == "hot"
    assert (restore["reused_positions"], restore["suffix_positions"]) == (4, 1)
    snapshot = check_block_invariants(engine)
    queue = snapshot["pool"]["free_queue"]
    assert 0 not in queue and 1 not in queue
    view = request_view(snapshot, again)
    assert [b["id"] for b in view["blocks"][:2]] == [0, 1]
    assert all(b["refcount"] == 1 for b in view["blocks"][:2])
    # The new rows went to the queue's head: block 3.
    assert view["blocks"][2]["id"] == 3
    drain(engine)
    check_all_finished(engine)


def test_a_cached_block_taken_from_the_head_is_evicted_then() -> None:
    engine = engine_with("blocks", num_blocks=4)
    run_one(engine, PROMPT, 1)  # caches [1, 2] in block 0 and [3, 4] in block 1
    assert [c["block"] for c in engine.snapshot()["pool"]["cached"]] == [0, 1]
    assert engine.snapshot()["pool"]["free_queue"] == [3, 2, 1, 0]
    # Three blocks from the head: 3, 2 and 1; block 1 was cached, so it is evicted now.
    _, events = run_one(engine, [7, 7, 7, 7, 7], 1)
    assert [e["block"] for e in events_of(events, "block_evicted")] == [1]
    assert 1 not in [c["block"] for c in engine.snapshot()["pool"]["cached"]]
    # A's prompt again: its first block is still cached, its second went.
    again, events = run_one(engine, PROMPT, 1)
    assert restore_of(events, again)["hit_blocks"] == [0]


def test_a_block_hash_covers_its_parent_and_a_hit_stops_at_the_first_miss() -> None:
    engine = engine_with("blocks", num_blocks=16)
    run_one(engine, PROMPT, 1)
    # [3, 4] is cached, but after [1, 2]: after [8, 8] it is another block.
    other, events = run_one(engine, [8, 8, 3, 4, 5], 1)
    assert restore_of(events, other)["hit_blocks"] == []
    assert "none of the prompt's 2 full blocks is cached" in restore_of(events, other)["reason"]
    # A prompt that is exactly A's first four tokens hits all but its last token: one block.
    short, events = run_one(engine, [1, 2, 3, 4], 1)
    assert restore_of(events, short)["hit_blocks"] == [0]
    assert restore_of(events, short)["reused_positions"] == 2


def test_a_block_is_cached_as_soon_as_it_is_full_and_no_clock_expires_it() -> None:
    clock = ManualClock()
    engine = engine_with("blocks", clock, num_blocks=16)
    first = engine.submit([1, 2, 3], max_tokens=4)
    events = engine.step()  # the prompt's rows: block 0 ([1, 2]) is full
    assert [(e["request_id"], e["block"]) for e in events_of(events, "block_cached")] == [
        (first, 0)
    ]
    assert request_view(engine.snapshot(), first)["status"] == "running"
    drain(engine)
    clock.advance(1e6)  # far beyond any ttl: the clock plays no part
    second, events = run_one(engine, [1, 2, 3, 9], 1)
    assert restore_of(events, second)["hit_blocks"] == [0]
    assert not events_of(events, "evict")


def test_blocks_kept_for_undo_are_hit_but_never_allocated() -> None:
    engine = engine_with("blocks", undo_depth=8, num_blocks=16)
    run_one(engine, PROMPT, 1)
    snapshot = engine.snapshot()
    retained = [b["id"] for b in snapshot["pool"]["blocks"] if b["state"] == "retained"]
    assert retained == [0, 1, 2]
    assert not set(retained) & set(snapshot["pool"]["free_queue"])
    again, events = run_one(engine, PROMPT, 1)
    assert restore_of(events, again)["hit_blocks"] == [0, 1]
    view_blocks = [b for e in events_of(events, "commit") for b in e["freed_blocks"]]
    assert 2 not in view_blocks
    # Its one new block came from the queue's head, not from the retained block 2.
    assert events_of(events, "preempt") == []
    assert 3 not in engine.snapshot()["pool"]["free_queue"]


def test_undo_brings_back_the_free_queue_order_and_the_hash_map() -> None:
    engine = engine_with("blocks", undo_depth=8, num_blocks=16)
    run_one(engine, PROMPT, 2)
    engine.submit([1, 2, 3, 4, 6, 6, 6], max_tokens=2)
    before = engine.snapshot()
    engine.step()
    assert engine.snapshot()["pool"] != before["pool"]
    engine.undo()
    after = engine.snapshot()
    assert after["pool"]["free_queue"] == before["pool"]["free_queue"]
    assert after["pool"]["cached"] == before["pool"]["cached"]
    drain(engine)
    check_all_finished(engine)


def test_the_design_documents_example_frees_touches_evicts_and_reuses_in_its_order() -> None:
    """vLLM's prefix caching document: 10 blocks of 4; request 0 has 15 prompt tokens, request
    1 shares its first 10 (14 tokens), request 2 its first 12 (29 tokens)."""
    engine = engine_with("blocks", block_size=4, num_blocks=10, max_active=4, max_batch_tokens=64)
    zero = list(range(1, 16))
    first = engine.submit(zero, max_tokens=3)
    engine.step()  # time 1: blocks 0-3, the first three full and cached
    assert cached_blocks(engine) == [0, 1, 2]
    engine.step()  # block 3 is full now
    assert cached_blocks(engine) == [0, 1, 2, 3]
    one = engine.submit([*zero[:10], 30, 30, 30, 30], max_tokens=2)
    events = engine.step()  # time 3 and 4: request 0 takes block 4; request 1 hits 0 and 1
    assert restore_of(events, one)["hit_blocks"] == [0, 1]
    assert [b["id"] for b in request_view(engine.snapshot(), one)["blocks"]] == [0, 1, 5, 6]
    # Time 5: request 0 finished; its blocks 4, 3, 2 joined the queue in reverse (0 and 1 are
    # request 1's too).
    assert request_view(engine.snapshot(), first)["status"] == "finished"
    assert engine.snapshot()["pool"]["free_queue"] == [7, 8, 9, 4, 3, 2]
    engine.step()  # time 6: request 1 finished
    assert engine.snapshot()["pool"]["free_queue"] == [7, 8, 9, 4, 3, 2, 6, 5, 1, 0]
    # Time 7: the hit blocks 0, 1, 2 leave the queue first; then five blocks from its head,
    # block 3 (cached) evicted as it is taken.
    two = engine.submit([*zero[:12]] + [31] * 17, max_tokens=2)
    events = engine.step()
    assert restore_of(events, two)["hit_blocks"] == [0, 1, 2]
    assert [b["id"] for b in request_view(engine.snapshot(), two)["blocks"]] == [
        0, 1, 2, 7, 8, 9, 4, 3,
    ]  # fmt: skip
    assert [e["block"] for e in events_of(events, "block_evicted")] == [3]
    drain(engine)
    check_all_finished(engine)


def cached_blocks(engine: Engine) -> list[int]:
    return [entry["block"] for entry in engine.snapshot()["pool"]["cached"]]


# -- "radix": SGLang's radix tree -------------------------------------------------------------


def tree_of(engine: Engine) -> dict[str, Any]:
    return engine.snapshot()["cache"]["tree"]


def spans(node: dict[str, Any]) -> Any:
    """The tree's shape: each node's span with the shapes of its children."""
    return [(child["tokens"], spans(child)) for child in node["children"]]


def node_at(tree: dict[str, Any], path: list[int]) -> dict[str, Any]:
    (node,) = [node for node, tokens in radix_nodes(tree) if tokens == path]
    return node


def test_a_radix_match_splits_the_node_it_ends_inside() -> None:
    engine = engine_with("radix", num_blocks=16)
    run_one(engine, [1, 2, 3, 4, 5, 6, 7], 1)
    tree = tree_of(engine)
    assert tree["tokens"] == [] and tree["lock"] == 0
    assert spans(tree) == [([1, 2, 3, 4, 5, 6], [])]  # whole blocks: the 7 is not cached
    second = engine.submit([1, 2, 3, 4, 9, 9, 9], max_tokens=3)
    events = engine.step()
    assert restore_of(events, second)["hit_blocks"] == [0, 1]
    # Split after [1, 2, 3, 4]; the new prompt's blocks were inserted after its prefill.
    tree = tree_of(engine)
    assert spans(tree) == [([1, 2, 3, 4], [([5, 6], []), ([9, 9], [])])]
    # The running request locks its path; the branch it did not take is unlocked.
    assert node_at(tree, [1, 2, 3, 4])["lock"] == 1
    assert node_at(tree, [1, 2, 3, 4, 9, 9])["lock"] == 1
    assert node_at(tree, [1, 2, 3, 4, 5, 6])["lock"] == 0
    drain(engine)
    assert all(node["lock"] == 0 for node, _ in radix_nodes(tree_of(engine)))
    check_all_finished(engine)


def test_radix_eviction_takes_the_least_recently_used_leaf_then_its_parent() -> None:
    engine = engine_with("radix")
    run_one(engine, [1, 2, 3, 4, 5, 6, 7], 1)
    run_one(engine, [1, 2, 3, 4, 9, 9, 9], 1)
    run_one(engine, [1, 2, 3, 4, 5, 6, 7], 1)  # [5, 6] now used after [9, 9]
    tree = tree_of(engine)
    older, newer = node_at(tree, [1, 2, 3, 4, 9, 9]), node_at(tree, [1, 2, 3, 4, 5, 6])
    assert older["last_access"] < newer["last_access"]
    parent = node_at(tree, [1, 2, 3, 4])
    # The tree holds 4 of the 8 blocks; seven for a long prompt: three must go.
    _, events = run_one(engine, [7] * 13, 1)
    evicted = [e["blocks"] for e in events_of(events, "evict")]
    assert evicted == [older["blocks"], newer["blocks"], parent["blocks"]]
    assert spans(tree_of(engine)) == [([7] * 12, [])]  # only the long prompt's whole blocks


def test_a_locked_radix_node_is_not_evicted() -> None:
    engine = engine_with("radix", max_active=2)
    run_one(engine, [1, 2, 3, 4, 5, 6, 7], 1)
    running = engine.submit([1, 2, 3, 4, 8], max_tokens=6)
    engine.step()  # it hit and locked [1, 2, 3, 4]; [5, 6] is an unlocked leaf
    tree = tree_of(engine)
    assert node_at(tree, [1, 2, 3, 4])["lock"] == 1
    leaf = node_at(tree, [1, 2, 3, 4, 5, 6])
    engine.submit([6] * 7, max_tokens=1)
    events = drain(engine)
    evicted = [e["blocks"] for e in events_of(events, "evict")]
    assert evicted and evicted[0] == leaf["blocks"]
    locked_blocks = node_at(tree, [1, 2, 3, 4])["blocks"]
    assert locked_blocks not in evicted[: len(evicted) - 1] or not evicted
    check_all_finished(engine)
    assert request_view(engine.snapshot(), running)["status"] == "finished"


@pytest.mark.parametrize("policy", ["blocks", "radix"])
def test_blocks_cached_under_replaced_weights_never_hit(policy: str) -> None:
    engine = engine_with(policy, num_blocks=16)
    run_one(engine, PROMPT, 2)
    # The cache key changes with the weights (so do the prefix hashes: no drain() here, which
    # expects a prefix to keep its hash).
    engine.target.weights = TinyModel(seed=4).weights
    start = len(engine.trace)
    again = engine.submit(PROMPT, max_tokens=2)
    engine.run()
    events = engine.trace[start:]
    assert restore_of(events, again)["cache"] == "cold"
    if policy == "radix":  # the old tree went at once
        assert {e["reason"] for e in events_of(events, "evict")} == {"model changed"}
    twice = engine.submit(PROMPT, max_tokens=2)  # the new weights' blocks do hit
    events = engine.step()
    assert len(restore_of(events, twice)["hit_blocks"]) == 2
    assert restore_of(events, twice)["reused_positions"] == 4
    engine.run()
    for request_id in (again, twice):  # the first ran on the old weights
        check_against_oracle(engine, request_id)


@pytest.mark.parametrize("policy", ["blocks", "radix"])
def test_a_prompt_computed_in_chunks_is_cached_chunk_by_chunk(policy: str) -> None:
    """vLLM caches a block once it is full, SGLang inserts each completed chunk."""
    engine = engine_with(policy, num_blocks=16, long_prefill_threshold=2)
    request = engine.submit([1, 2, 3, 4, 5, 6, 7], max_tokens=2)
    engine.step()  # rows 0 and 1: block 0 full, the prompt not done
    snapshot = check_block_invariants(engine)
    assert request_view(snapshot, request)["committed_positions"] == 2
    if policy == "blocks":
        assert cached_blocks(engine) == [0]
    else:
        assert spans(tree_of(engine)) == [([1, 2], [])]
        assert snapshot["cache"]["locks"] == {request: 2}
    engine.step()
    if policy == "blocks":
        assert cached_blocks(engine) == [0, 1]
    else:
        assert spans(tree_of(engine)) == [([1, 2], [([3, 4], [])])]
        assert engine.snapshot()["cache"]["locks"] == {request: 4}
    drain(engine)
    check_all_finished(engine)
