"""Hostile input and timing: interrupts while a round records its checkpoint, expired cache
entries in the snapshot, request ids that would garble a screen, values that overflow."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from tests.engine.helpers import (
    ManualClock,
    Tripwire,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    check_nothing_orphaned,
    drain,
    wire,
)

PROMPTS = ([1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7])

# -- interrupts around the checkpoint -----------------------------------------------------------


def busy_engine(undo_depth: int = 64) -> Engine:
    """Three requests with a draft, two rounds in (so there is history to keep or lose)."""
    target = TinyModel(seed=6)
    config = EngineConfig(block_size=2, draft_branching=2, undo_depth=undo_depth)
    engine = Engine(target, make_draft(target, seed=7), config=config, clock=ManualClock())
    for prompt in PROMPTS:
        engine.submit(prompt, max_tokens=8)
    engine.step()
    engine.step()
    return engine


@pytest.mark.parametrize("where", ["checkpoint", "resume retention", "trim history"])
@pytest.mark.parametrize("undo_depth", [1, 2, 64])
def test_an_interrupt_while_a_round_records_its_history_changes_nothing(
    where: str, undo_depth: int
) -> None:
    engine = busy_engine(undo_depth)
    before, trace = engine.snapshot(), list(engine.trace)
    tick, undo = engine.tick, engine.undo_available
    owner, name = {
        "checkpoint": (engine.history, "save"),
        "resume retention": (engine.history, "resume_retention"),
        "trim history": (engine.history, "trim"),
    }[where]
    unwire = wire(owner, name, Tripwire(1))  # the first call in the next step() raises
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    unwire()
    assert (engine.tick, engine.undo_available) == (tick, undo)
    assert engine.snapshot() == before
    assert engine.trace[: len(trace)] == trace
    assert [e["kind"] for e in engine.trace[len(trace) :]] == ["step_aborted"]
    check_block_invariants(engine)
    check_nothing_orphaned(engine)
    # The history is the one before: the first undo rewinds the last real round.
    engine.undo()
    assert engine.tick == tick - 1
    drain(engine)
    for number in (1, 2, 3):
        check_against_oracle(engine, f"request-{number}")


def test_an_interrupt_in_the_trim_after_a_round_keeps_every_undo() -> None:
    engine = busy_engine(undo_depth=2)
    assert engine.undo_available == 2  # full: the next round trims the oldest entry
    before = engine.snapshot()
    unwire = wire(engine.history, "trim", Tripwire(1))
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    unwire()
    assert engine.snapshot() == before
    engine.undo()
    engine.undo()  # the entry the interrupted trim had dropped is back, with its blocks
    assert engine.tick == 0
    check_block_invariants(engine)
    check_nothing_orphaned(engine)
    drain(engine)
    for number in (1, 2, 3):
        check_against_oracle(engine, f"request-{number}")


# -- expired cache entries ----------------------------------------------------------------------


def cache_states(engine: Engine) -> list[str]:
    return [entry["state"] for entry in engine.snapshot()["cache"]]


def test_an_entry_past_its_warm_time_is_expired_until_the_next_round_releases_it() -> None:
    clock = ManualClock()
    config = EngineConfig(block_size=2, state_ttl=1.0, prefix_ttl=5.0)
    engine = Engine(TinyModel(seed=3), config=config, clock=clock)
    engine.generate([1, 2, 3, 4, 5], max_tokens=2)  # publishes its prompt, then all of it
    entries = engine.snapshot()["cache"]
    assert [(e["hot_until"], e["warm_until"]) for e in entries] == [(1.0, 5.0)] * 2
    held = sorted({b for e in entries for b in e["blocks"]})
    for now, state in ((0.5, "hot"), (1.0, "warm"), (4.9, "warm"), (5.0, "expired")):
        clock.now = now
        assert cache_states(engine) == [state] * 2, f"at {now}s"
    # Nothing has released the blocks yet: the engine expires entries when a round starts.
    assert engine.metrics()["blocks"]["cached"] == len(held)
    blocks = engine.snapshot()["pool"]["blocks"]
    assert [blocks[b]["state"] for b in held] == ["cached"] * len(held)

    other = engine.submit([9, 9], max_tokens=1)  # not a prefix: the round has its own work
    events = engine.step()
    assert [e["reason"] for e in events if e["kind"] == "evict"] == ["expired"] * 2
    assert [e["tokens"][:2] for e in engine.snapshot()["cache"]] == [[9, 9]]  # the new one
    blocks = engine.snapshot()["pool"]["blocks"]
    # Released: kept only for the undo history (refcount 0), no longer cached.
    assert {(blocks[b]["state"], blocks[b]["refcount"]) for b in held} == {("retained", 0)}
    check_block_invariants(engine)
    engine.undo()
    assert cache_states(engine) == ["expired"] * 2
    drain(engine)
    check_against_oracle(engine, other)


def test_a_hot_time_after_the_warm_time_does_not_keep_an_entry_alive() -> None:
    clock = ManualClock()
    config = EngineConfig(block_size=2, state_ttl=10.0, prefix_ttl=5.0)
    engine = Engine(TinyModel(seed=3), config=config, clock=clock)
    engine.generate([1, 2, 3, 4, 5], max_tokens=2)
    clock.now = 4.0
    assert cache_states(engine) == ["hot"] * 2
    clock.now = 6.0
    assert cache_states(engine) == ["expired"] * 2
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=2)
    events = engine.step()
    assert [e["cache"] for e in events if e["kind"] == "restore"] == ["cold"]
    drain(engine)
    check_against_oracle(engine, rid)


def test_a_one_position_restore_says_position() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=3), config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2], max_tokens=1)  # publishes the 1-position prefix [1] first
    engine.submit([1, 5], max_tokens=1)
    (hot,) = [e for e in engine.step() if e["kind"] == "restore"]
    clock.now = 50.0  # past the hot cursor, before the warm prefix expires
    engine.submit([1, 6], max_tokens=1)
    (warm,) = [e for e in engine.step() if e["kind"] == "restore"]
    assert (hot["cache"], hot["reused_positions"]) == ("hot", 1)
    assert (warm["cache"], warm["reused_positions"]) == ("warm", 1)
    assert "over 1 position," in hot["reason"]
    assert "prefix of 1 position alive" in warm["reason"]


# -- overflow inside a forward ------------------------------------------------------------------


@pytest.mark.parametrize("numpy_errors", ["warn", "raise"])  # NumPy's default, and strict
def test_an_overflowing_forward_fails_its_request_without_a_word_on_stderr(
    numpy_errors: str, capfd: pytest.CaptureFixture[str]
) -> None:
    errors = dict.fromkeys(("over", "invalid", "divide"), numpy_errors)
    target = TinyModel(seed=5)
    draft = make_draft(target, seed=6)
    # A head make_draft would refuse, set directly: entries of +-1e308 make some logit of
    # every row (a sum of 16 terms of RMS 1e308) overflow.
    head = 1e308 * np.sign(draft.weights.head)
    draft.weights = dataclasses.replace(draft.weights, head=head)
    engine = Engine(target, draft, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=4)
    with warnings.catch_warnings(record=True) as caught, np.errstate(**errors):
        warnings.simplefilter("always")
        results = engine.run(raise_on_error=False)
    assert [w.message for w in caught] == []
    assert capfd.readouterr() == ("", "")
    assert [(r.request_id, r.finish_reason) for r in results] == [(rid, "error")]
    assert "non-finite" in (results[0].error or "")
    # A healthy engine on the same target is unaffected (and exact).
    healthy = Engine(target, make_draft(target, seed=6), clock=ManualClock())
    other = healthy.submit([1, 2, 3], max_tokens=4)
    drain(healthy)
    check_against_oracle(healthy, other)


# -- found by a second exploratory pass ---------------------------------------------------------


def pool_short_of_room() -> tuple[Engine, TinyModel]:
    """A cancelled request's blocks are retained for undo; the next round needs them."""
    target = TinyModel(seed=7)
    engine = Engine(target, config=EngineConfig(block_size=1, num_blocks=6), clock=ManualClock())
    first = engine.submit([1, 2, 3], max_tokens=3)
    engine.step()
    engine.step()
    engine.cancel(first)
    engine.submit([4, 5, 6], max_tokens=3)
    assert engine.metrics()["blocks"]["retained"] > 0
    return engine, target


def test_an_interrupt_before_the_round_writes_keeps_the_undo_it_trimmed_for_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, target = pool_short_of_room()
    before = (engine.undo_available, engine.snapshot())

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, "forward_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    monkeypatch.undo()
    assert engine.trace[-1]["kind"] == "step_aborted"
    assert (engine.undo_available, engine.snapshot()) == before
    check_block_invariants(engine)
    while engine.undo_available:  # every kept round still rewinds
        engine.undo()
        check_block_invariants(engine)
    drain(engine)
    check_all_finished(engine)


def test_an_interrupt_after_the_round_wrote_rows_drops_only_the_rounds_it_trimmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, _ = pool_short_of_room()
    before = engine.snapshot()
    real = Engine._commit

    def interrupted_commit(self: Engine, *args: object) -> None:
        raise KeyboardInterrupt  # after the round stored its rows

    monkeypatch.setattr(Engine, "_commit", interrupted_commit)
    writes = engine.pool.writes
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    monkeypatch.setattr(Engine, "_commit", real)
    assert engine.pool.writes > writes  # rows went into blocks the dropped rounds retained
    after = engine.snapshot()
    assert after["undo"]["available"] < before["undo"]["available"]
    assert (after["tick"], after["requests"]) == (before["tick"], before["requests"])
    check_block_invariants(engine)
    drain(engine)
    check_all_finished(engine)


def test_no_draft_is_grown_when_no_position_is_left_to_verify_it() -> None:
    target = TinyModel(seed=7)
    for budget, requests in ((1, 1), (2, 2), (4, 4)):
        config = EngineConfig(max_batch_tokens=budget)
        engine = Engine(target, make_draft(target, seed=8), config=config, clock=ManualClock())
        for i in range(requests):
            engine.submit([1, 2, 3 + i], max_tokens=8)
        engine.run()
        metrics = engine.metrics()
        assert metrics["drafts"]["proposed"] == metrics["work"]["draft_forwards"] == 0
        check_all_finished(engine)
    # One position to spare: the budget can verify a node, so drafting goes on.
    engine = Engine(target, make_draft(target, seed=8), config=EngineConfig(max_batch_tokens=3))
    engine.submit([1, 2, 3], max_tokens=8)
    engine.submit([1, 2, 4], max_tokens=8)
    engine.run()
    assert engine.metrics()["drafts"]["verified"] > 0


def test_committed_counts_the_tokens_requests_hold_after_a_rollback() -> None:
    target = TinyModel(seed=7)
    engine = Engine(target, make_draft(target, seed=8), clock=ManualClock())
    kept = engine.submit([1, 2, 3], max_tokens=6)
    engine.submit([4, 5], max_tokens=6)
    for _ in range(3):
        engine.step()
    before = engine.metrics()["requests"]["committed_tokens"]
    removed = engine.rollback(kept, 2)
    after = engine.metrics()["requests"]["committed_tokens"]
    assert (
        after
        == before - len(removed)
        == sum(len(r["generated"]) for r in engine.snapshot()["requests"])
    )
    engine.undo()  # rewinds the round before the rollback, and the count with it
    assert engine.metrics()["requests"]["committed_tokens"] == sum(
        len(r["generated"]) for r in engine.snapshot()["requests"]
    )


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
