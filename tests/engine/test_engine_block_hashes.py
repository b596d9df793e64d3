"""Prefix hashes of full blocks: chained over the prefix, kept across rollback, preemption,
warm restores and copies, and shown only for the part of a block a request has filled."""

from __future__ import annotations

from engine import Engine, EngineConfig, TinyModel
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    drain,
    events_of,
    request_view,
    restore_of,
)


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
