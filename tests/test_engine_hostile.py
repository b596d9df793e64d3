"""Hostile input and timing: interrupts while a round records its checkpoint, expired cache
entries in the snapshot, request ids that would garble a screen, values that overflow."""

from __future__ import annotations

import pytest
from engine_helpers import (
    ManualClock,
    Tripwire,
    check_against_oracle,
    check_block_invariants,
    check_nothing_orphaned,
    drain,
    wire,
)

from engine import Engine, EngineConfig, TinyModel, make_draft

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


@pytest.mark.parametrize("where", ["_checkpoint", "_resume_retention", "_trim_history"])
@pytest.mark.parametrize("undo_depth", [1, 2, 64])
def test_an_interrupt_while_a_round_records_its_history_changes_nothing(
    where: str, undo_depth: int
) -> None:
    engine = busy_engine(undo_depth)
    before, trace = engine.snapshot(), list(engine.trace)
    tick, undo = engine.tick, engine.undo_available
    unwire = wire(engine, where, Tripwire(1))  # the first call in the next step() raises
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
    unwire = wire(engine, "_trim_history", Tripwire(1))
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
