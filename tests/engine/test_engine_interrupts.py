"""Interrupts and failing forwards: a round interrupted anywhere (taking its checkpoint,
trimming history, after writing rows) or a forward that overflows leaves the engine as it was,
but for one `step_aborted` event or the failed request."""

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
    check_live_prefixes,
    check_nothing_orphaned,
    drain,
    wire,
)

PROMPTS = ([1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7])


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


def test_an_interrupt_after_the_round_wrote_rows_puts_back_the_rounds_it_trimmed(
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
    assert engine.pool.writes > writes  # rows went into blocks the trimmed rounds retained
    after = engine.snapshot()
    # Those blocks' rows were saved when the rounds were trimmed: all of it comes back.
    assert after == before
    assert (after["tick"], after["requests"]) == (before["tick"], before["requests"])
    check_block_invariants(engine)
    while engine.undo_available:  # every kept round still rewinds
        engine.undo()
        check_block_invariants(engine)
        check_live_prefixes(engine)
    drain(engine)
    check_all_finished(engine)
