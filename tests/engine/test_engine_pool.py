"""Paged KV pool: refcounts, sharing, copy-on-write, leaks, fitting and preemption."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from engine.kv import BlockPool
from engine.rows import Joined, Rows
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    drain,
    events_of,
    request_view,
)


def table(snapshot: dict, request_id: str) -> list[int]:
    return [block["id"] for block in request_view(snapshot, request_id)["blocks"]]


def test_a_fresh_engine_has_every_block_free() -> None:
    engine = Engine(TinyModel(), None, config=EngineConfig(num_blocks=12, block_size=4))
    snapshot = check_block_invariants(engine)
    blocks = snapshot["metrics"]["blocks"]
    assert blocks == {
        "total": 12,
        "free": 12,
        "used": 0,
        "held": 0,
        "cached": 0,
        "shared": 0,
        "retained": 0,
    }
    assert {b["state"] for b in snapshot["pool"]["blocks"]} == {"free"}
    engine.submit([1, 2, 3], max_tokens=4)  # queued work holds no blocks yet
    assert check_block_invariants(engine)["metrics"]["blocks"]["free"] == 12


@pytest.mark.parametrize(
    ("draft", "config"),
    [
        (False, dict(block_size=1)),
        (True, dict(block_size=2, draft_width=3)),
        (True, dict(block_size=4, draft_width=5, draft_branching=2)),
        (True, dict(block_size=16, draft_width=2, draft_branching=3, undo_depth=0)),
    ],
)
def test_invariants_hold_after_every_step(draft: bool, config: dict) -> None:
    target = TinyModel(seed=3)
    engine = Engine(
        target,
        make_draft(target, seed=2) if draft else None,
        config=EngineConfig(**config),
        clock=ManualClock(),
    )
    for prompt in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3], [8]):
        engine.submit(prompt, max_tokens=6)
    drain(engine, live=True)  # also: every running request's state is oracle-exact
    check_all_finished(engine)


def test_a_shared_prefix_shares_blocks_and_copies_before_writing() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=1), None, config=EngineConfig(block_size=4), clock=clock)
    first = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=8)
    engine.step()  # publishes the prefix [1..6, g1]
    second = engine.submit([1, 2, 3, 4, 5, 9, 9], max_tokens=3)  # shares 5 positions
    events = engine.step()
    (restore,) = [e for e in events_of(events, "restore") if e["request_id"] == second]
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 5)
    snapshot = check_block_invariants(engine)
    mine, theirs = table(snapshot, second), table(snapshot, first)
    # The full first block (positions 0-3) is shared, without a copy...
    assert mine[0] == theirs[0]
    shared = next(b for b in snapshot["pool"]["blocks"] if b["id"] == mine[0])
    assert shared["state"] == "shared" and shared["refcount"] >= 2
    # ...while the partly shared second block was copied before the new request wrote into it.
    assert mine[1] != theirs[1]
    assert request_view(snapshot, second)["blocks"][1]["slots"][:2] == [5, 9]
    drain(engine)
    check_all_finished(engine)


def test_nothing_leaks_once_everything_finished_and_expired() -> None:
    clock = ManualClock()
    target = TinyModel(seed=2)
    config = EngineConfig(block_size=2, num_blocks=40, undo_depth=0)
    engine = Engine(target, make_draft(target, seed=5), config=config, clock=clock)
    ids = [engine.submit(p, max_tokens=5) for p in ([1, 2, 3], [1, 2, 4], [7], [1, 2, 3, 9])]
    engine.step()
    engine.cancel(ids[1])
    drain(engine)
    engine.rollback(ids[0], 2)  # reopened, then finished again
    drain(engine)
    assert check_block_invariants(engine)["metrics"]["blocks"]["used"] > 0  # the cache holds some
    clock.now = 1000.0
    engine.step()  # expires every cache entry
    blocks = check_block_invariants(engine)["metrics"]["blocks"]
    assert blocks["free"] == blocks["total"], blocks


def test_with_undo_history_released_blocks_are_retained_not_lost() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2, 3, 4], max_tokens=3)
    clock.now = 1000.0
    engine.step()
    snapshot = check_block_invariants(engine)
    blocks = snapshot["metrics"]["blocks"]
    assert blocks["cached"] == 0 and blocks["used"] == blocks["retained"]
    assert all(b["refcount"] == 0 for b in snapshot["pool"]["blocks"])


@pytest.mark.parametrize(
    ("block_size", "num_blocks", "prompt_length", "max_tokens", "fits"),
    [
        (2, 2, 3, 1, True),  # 4 positions = 2 blocks
        (2, 2, 3, 2, False),  # 5 positions = 3 blocks
        (4, 1, 4, 0, True),
        (4, 1, 4, 1, False),
        (1, 5, 1, 4, True),
        (1, 5, 2, 4, False),
    ],
)
def test_a_request_that_can_never_fit_is_rejected_at_submit(
    block_size: int, num_blocks: int, prompt_length: int, max_tokens: int, fits: bool
) -> None:
    target = TinyModel(seed=0)
    config = EngineConfig(block_size=block_size, num_blocks=num_blocks)
    engine = Engine(target, make_draft(target), config=config, clock=ManualClock())
    prompt = list(range(1, prompt_length + 1))
    before = engine.snapshot()
    if not fits:
        with pytest.raises(ValueError, match="blocks"):
            engine.submit(prompt, max_tokens=max_tokens)
        assert engine.snapshot() == before
        return
    rid = engine.submit(prompt, max_tokens=max_tokens)
    drain(engine)
    check_against_oracle(engine, rid)


def test_a_request_filling_the_whole_pool_evicts_the_cache_and_finishes() -> None:
    target = TinyModel(seed=4)
    config = EngineConfig(block_size=2, num_blocks=5, draft_width=4)
    engine = Engine(target, make_draft(target, seed=1), config=config, clock=ManualClock())
    for prompt in ([1, 2], [3, 4], [5, 6]):
        engine.generate(prompt, max_tokens=2)  # leaves cached blocks behind
    assert engine.metrics()["blocks"]["cached"] > 0
    big = engine.submit([9, 8, 7], max_tokens=7)  # 10 positions: all 5 blocks
    events = drain(engine)
    assert events_of(events, "evict")
    check_against_oracle(engine, big)


def test_rejected_speculation_frees_its_blocks_in_the_same_round() -> None:
    target = TinyModel(seed=0)
    # A random draft is nearly always wrong, so most speculative blocks are dropped.
    config = EngineConfig(block_size=1, draft_width=4, undo_depth=0)
    engine = Engine(target, TinyModel(seed=99, depth=1), config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=10)
    seen_drop = False
    while not engine.idle:
        events = engine.step()
        snapshot = check_block_invariants(engine)
        for commit in events_of(events, "commit"):
            if not commit["freed_blocks"]:
                continue
            seen_drop = True
            states = {b["id"]: b["state"] for b in snapshot["pool"]["blocks"]}
            for block in commit["freed_blocks"]:
                assert states[block] == "dropped", (block, states[block])
            view = request_view(snapshot, rid)
            if view["status"] != "finished":
                assert set(commit["freed_blocks"]) == set(view["dropped_blocks"])
                assert not set(commit["freed_blocks"]) & set(table(snapshot, rid))
    assert seen_drop
    check_against_oracle(engine, rid)


def test_preemption_frees_the_victim_and_requeues_it_first() -> None:
    config = EngineConfig(block_size=2, num_blocks=6, max_active=2)
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    for prompt in ([1, 2, 3, 4], [5, 6, 7], [1, 2, 9]):
        engine.submit(prompt, max_tokens=5)
    preempted = False
    while not engine.idle:
        events = engine.step()
        snapshot = check_block_invariants(engine)
        for preempt in events_of(events, "preempt"):
            preempted = True
            victim = preempt["request_id"]
            view = request_view(snapshot, victim)
            assert view["blocks"] == [] and view["status"] == "queued"
            assert view["restore"] is None  # it holds no rows: nothing restored for it now
            # Front of the queue: only a request deferred this round may wait ahead of it.
            deferred = {e["request_id"] for e in events_of(events, "deferred")}
            ahead = snapshot["queue"][: snapshot["queue"].index(victim)]
            assert set(ahead) <= deferred, (ahead, deferred)
            assert view["preemptions"] >= 1
    assert preempted
    assert len(check_all_finished(engine)) == 3


def plain(value: object) -> bool:
    """Only JSON's own types: dict with str keys, list, str, int, float, bool, None."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return value is None or type(value) in (str, int, float, bool)


def test_snapshot_is_plain_json_data() -> None:
    target = TinyModel(seed=2)
    config = EngineConfig(block_size=2, draft_width=3, draft_branching=2)
    engine = Engine(target, make_draft(target), config=config, clock=ManualClock())
    engine.submit([1, 2, 3], max_tokens=6)
    engine.submit([1, 2, 4], max_tokens=6, eos_id=5)
    engine.step()
    snapshot = engine.snapshot()
    assert plain(snapshot)
    assert json.loads(json.dumps(snapshot)) == snapshot
    drain(engine)
    assert plain(engine.snapshot()) and all(plain(event) for event in engine.trace)


SNAPSHOT_SCRIPT = """
import json
from engine import Engine, EngineConfig, TinyModel, make_draft
target = TinyModel(seed=3)
engine = Engine(target, make_draft(target), config=EngineConfig(block_size=2),
                clock=lambda: 0.0)
engine.generate([1, 2, 3, 4, 5], max_tokens=6)
engine.submit([1, 2, 3, 4, 6], max_tokens=3)
engine.step()
print(json.dumps([engine.snapshot(), engine.trace], sort_keys=True))
"""


def test_snapshots_are_identical_across_processes() -> None:
    """Block hashes and everything else must not depend on Python's per-process hash seed."""
    root = Path(__file__).resolve().parents[2]
    outputs = []
    for seed in ("1", "2"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(root), *filter(None, [environment.get("PYTHONPATH")])]
        )
        done = subprocess.run(
            [sys.executable, "-c", SNAPSHOT_SCRIPT],
            capture_output=True,
            text=True,
            env=environment,
            check=True,
        )
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    snapshot = json.loads(outputs[0])[0]
    assert any(block["hash"] for block in snapshot["pool"]["blocks"])


def test_a_lone_request_with_an_independent_draft_never_preempts_itself() -> None:
    # The draft's rows lag the target's inside the same blocks; that must not force copies
    # (which, in a pool this tight, would preempt the only request again and again).
    target = TinyModel(seed=0)
    engine = Engine(
        target,
        TinyModel(seed=5, depth=1),
        config=EngineConfig(block_size=4, num_blocks=3, undo_depth=0),
        clock=lambda: 0.0,
    )
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=7)
    engine.run()
    assert engine.metrics()["requests"]["preemptions"] == 0
    assert (
        engine.result(rid).tokens == greedy_generate(target, [1, 2, 3, 4, 5], max_tokens=7).tokens
    )


def test_a_long_queue_waits_its_turn_instead_of_thrashing_the_pool() -> None:
    """max_active bounds the requests holding KV at once: a queue longer than the pool holds
    is served in order, not admitted round-robin into preemption after preemption."""
    config = EngineConfig(max_batch_tokens=16, max_active=8, block_size=4, num_blocks=64)
    target = TinyModel(seed=7)
    engine = Engine(target, make_draft(target, seed=8), config=config, clock=ManualClock())
    rng = random.Random(1)
    ids = [engine.submit([rng.randrange(32) for _ in range(8)], max_tokens=16) for _ in range(32)]
    finished_at: dict[str, int] = {}
    while not engine.idle:
        engine.step()
        snapshot = check_block_invariants(engine)
        assert snapshot["metrics"]["requests"]["running"] <= config.max_active
        for view in snapshot["requests"]:
            if view["status"] == "finished":
                finished_at.setdefault(view["id"], engine.tick)
    assert engine.metrics()["requests"]["preemptions"] == 0  # 8 x 6 blocks fit in 64
    # First come, first served: the first eight finish before any of the last eight.
    assert max(finished_at[i] for i in ids[:8]) < min(finished_at[i] for i in ids[-8:])
    assert len(check_all_finished(engine)) == 32


@pytest.mark.parametrize("max_active", [1, 3, 8])
@pytest.mark.parametrize("num_blocks", [12, 400])
def test_pending_positions_is_what_the_next_round_computes_at_most(
    max_active: int, num_blocks: int
) -> None:
    # Greedy, so a round computes exactly the rows its requests lack: as many as announced,
    # fewer only when a cached prefix covered some or a request had to wait for space.
    config = EngineConfig(max_active=max_active, num_blocks=num_blocks, block_size=4)
    engine = Engine(TinyModel(seed=2), config=config, clock=ManualClock())
    rng = random.Random(max_active * num_blocks)
    for length in (30, 3, 17, 9, 30, 1, 12):
        engine.submit([rng.randrange(32) for _ in range(length)], max_tokens=5)
    engine.submit([5, 5, 5, 5, 5], max_tokens=0)  # computes its prompt, then finishes
    engine.submit([1, 2, 3, 4, 5, 6, 7, 8], max_tokens=3)
    engine.submit([1, 2, 3, 4, 5, 6, 7, 8, 9], max_tokens=3)  # reuses the one before's prefix
    exact_rounds = 0
    while not engine.idle:
        announced = engine.pending_positions()
        before = engine.snapshot()["metrics"]["work"]["encoder_rows"]
        events = engine.step()
        computed = engine.snapshot()["metrics"]["work"]["encoder_rows"] - before
        assert computed <= announced
        reused = any(e["kind"] == "restore" and e.get("reused_positions") for e in events)
        if not reused and not any(e["kind"] in ("deferred", "preempt") for e in events):
            assert computed == announced
            exact_rounds += 1
    assert exact_rounds > 0
    assert engine.pending_positions() == 0
    check_all_finished(engine)


def test_pending_positions_counts_the_rows_an_independent_draft_still_lacks() -> None:
    # A draft with its own KV catches up on every prompt the round after the target did.
    target = TinyModel(seed=2)
    draft = TinyModel(seed=9, depth=1, vocab_size=target.vocab_size)
    config = EngineConfig(max_active=4, num_blocks=400, block_size=4)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    for i in range(4):
        engine.submit([i] * 50, max_tokens=6)
    assert engine.pending_positions() == 4 * 50  # the target's prefill; the draft waits for it
    engine.step()
    announced = engine.pending_positions()
    before = engine.snapshot()["metrics"]["work"]
    engine.step()
    after = engine.snapshot()["metrics"]["work"]
    catch_up = 4 * 51  # each prompt and its first token, in the draft
    assert after["draft_rows"] - before["draft_rows"] >= catch_up
    assert announced >= catch_up + 4  # and the target's one pending row each
    drain(engine)
    check_all_finished(engine)


def small_pool(num_blocks: int = 4, block_size: int = 4) -> BlockPool:
    return BlockPool({"target": TinyModel()}, num_blocks=num_blocks, block_size=block_size)


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


def test_eviction_for_space_spares_an_entry_whose_blocks_a_running_request_holds() -> None:
    # vLLM evicts only cached blocks nobody uses; an entry whose blocks a running request holds
    # would free none, and its hit would be lost for nothing.
    config = EngineConfig(block_size=2, num_blocks=18, max_active=3, undo_depth=0)
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    engine.generate([1, 2, 3, 4, 5], max_tokens=1)
    running = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=30)  # hits it, publishes its own
    engine.step()
    engine.generate([8, 8, 8, 8, 8], max_tokens=1)
    cache = {tuple(e["tokens"]): e["blocks"] for e in engine.snapshot()["cache"]}
    held = set(table(engine.snapshot(), running))
    spared = cache[(1, 2, 3, 4, 5, 6)]
    assert set(spared) <= held  # all its blocks are the running request's too
    assert list(cache) == [(1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 6), (8, 8, 8, 8, 8)]  # LRU first
    late = engine.submit([7] * 24, max_tokens=2)  # 12 blocks; 10 are free
    events = engine.step()
    evicted = [e["blocks"] for e in events_of(events, "evict")]
    assert evicted == [cache[(1, 2, 3, 4, 5)], cache[(8, 8, 8, 8, 8)]]  # past the spared one
    assert [tuple(e["tokens"]) for e in engine.snapshot()["cache"]] == [(1, 2, 3, 4, 5, 6)]
    drain(engine)
    check_against_oracle(engine, running)
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


def test_a_block_only_cache_entries_share_counts_as_cached_not_shared() -> None:
    from deepinfer_tui.scenario import default_scenario  # the scenario that shows it
    from deepinfer_tui.session import Session

    session = Session(default_scenario())
    for _ in range(5):
        session.step()
    engine = session.engine
    snapshot = engine.snapshot()
    cache_only = {b for entry in snapshot["cache"] for b in entry["blocks"]} - {
        b for r in engine.requests.values() for b in r.table
    }
    refcounts = {b["id"]: b["refcount"] for b in snapshot["pool"]["blocks"]}
    assert any(refcounts[b] > 1 for b in cache_only)  # the case in question is here
    states = [b["state"] for b in snapshot["pool"]["blocks"]]
    assert snapshot["metrics"]["blocks"]["shared"] == states.count("shared")
