"""Every cache policy keeps every request exact: an oracle grid (staggered arrivals, shared
prefixes, a cancel, a rollback and an undo, under pressure and with room, chunked or not) whose
tokens must not depend on the policy, and the property tests' random interleavings of every
operation under the blocks and radix policies (invariants checked after every step)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Engine, EngineConfig, TinyModel, make_draft
from tests.engine.helpers import check_all_finished, check_block_invariants, drain
from tests.engine.test_engine_properties import (
    COMMON,
    EVERYTHING,
    NO_HISTORY,
    Setup,
    operation_lists,
    run_and_check,
    setups,
)

POLICIES = ("ttl", "blocks", "radix")

# -- every policy: exactness, and tokens independent of the policy ---------------------------

PROMPTS = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 0], [1, 2, 3, 4, 5, 6, 1, 2], [4, 4], [1, 2, 3]]


SCHEDULES = {
    "default": {},
    # Prompts computed two rows at a time in a small budget, the longest cached prefix first.
    "chunked-lpm": dict(long_prefill_threshold=2, token_budget=6, schedule_policy="lpm"),
}


def scenario(
    policy: str, block_size: int, draft: bool, positions: int, schedule: str = "default"
) -> dict[str, tuple]:
    """Shared prefixes, staggered arrivals, a cancel, a rollback and an undo; returns the
    results' tokens by request."""
    target = TinyModel(seed=5, window=4)
    config = EngineConfig(
        cache_policy=policy,
        block_size=block_size,
        num_blocks=positions // block_size,
        max_active=3,
        undo_depth=4,
        draft_width=3,
        **SCHEDULES[schedule],
    )
    engine = Engine(target, make_draft(target, seed=6) if draft else None, config=config)
    ids = [engine.submit(p, max_tokens=5) for p in PROMPTS[:3]]
    for _ in range(2):
        engine.step()
        check_block_invariants(engine)
    engine.rollback(ids[0], 2)
    engine.undo()
    check_block_invariants(engine)
    ids += [engine.submit(p, max_tokens=4) for p in PROMPTS[3:]]
    engine.step()
    engine.cancel(ids[1])
    drain(engine)
    results = check_all_finished(engine)
    again = engine.submit(PROMPTS[2], max_tokens=5)  # after everything: a hit where cached
    drain(engine)
    check_all_finished(engine)
    results.append(engine.result(again))
    # How far the cancelled one got depends on the schedule (check_all_finished made it a
    # prefix of the oracle's); what the others say does not.
    return {r.request_id: r.tokens for r in results if r.finish_reason != "cancelled"}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("positions", [16, 256])  # under pressure (the longest needs 13), roomy
@pytest.mark.parametrize("draft", [False, True])
@pytest.mark.parametrize("block_size", [1, 2, 4])
def test_every_policy_gives_the_oracle_tokens_whatever_the_interleaving(
    block_size: int, draft: bool, positions: int, schedule: str
) -> None:
    outcomes = {
        policy: scenario(policy, block_size, draft, positions, schedule) for policy in POLICIES
    }
    assert outcomes["blocks"] == outcomes["ttl"] == outcomes["radix"]


# -- random interleavings of every operation, under the new policies --------------------------

NEW_POLICIES = ("blocks", "radix")


@pytest.mark.parametrize(
    ("pool", "weights", "rewind"),
    [("roomy", EVERYTHING, True), ("small", NO_HISTORY, False), ("pressure", EVERYTHING, True)],
)
@settings(max_examples=30, **COMMON)
@given(data=st.data())
def test_policies_keep_invariants_and_exactness_in_random_interleavings(
    pool: str, weights: dict[str, int], rewind: bool, data: st.DataObject
) -> None:
    """The property tests' three spaces (see test_engine_properties), under blocks and radix."""
    setup = data.draw(setups(pool=pool, policies=NEW_POLICIES), label="setup")
    operations = data.draw(operation_lists(weights), label="operations")
    run_and_check(setup, operations, rewind=rewind)


PRESSED = dict(
    cache_policy="blocks",
    draft_width=1,
    draft_branching=2,
    max_draft_nodes=3,
    max_batch_tokens=3,
    block_size=4,
    max_active=1,
    num_blocks=2,
    undo_depth=1,
    cache_capacity=1,
)
FOUND = {
    # A round reuses a cached free block (evicting it); undo brings back the hash map that
    # names it, so its rows must come back too.
    "evicted then undone": [
        ("submit", [0], 4, None), ("rollback", 0, 1), ("step",), ("step",),
        ("submit", [2, 0], 0, None), ("submit", [0], 0, 6), ("undo",), ("step",),
        ("submit", [2, 2, 4, 4, 5, 5], 2, None), ("clock", 2.0), ("step",),
        ("rollback", 1, 3), ("step",), ("rollback", 1, 2), ("rollback", 3, 1),
        ("rollback", 4, 2), ("interrupt", "draft forward", 2), ("undo",), ("step",),
        ("undo",),
    ],
    # A block the latest round dropped, retained for history the step trimmed, is free after
    # the undo: the free queue comes back with it at its tail, the rest exactly.
    "dropped and retained": [
        ("submit", [0], 4, None), ("rollback", 0, 1), ("step",), ("step",),
        ("submit", [0], 0, None), ("submit", [0], 0, None), ("step",), ("undo",),
    ],
}  # fmt: skip


@pytest.mark.parametrize("found", list(FOUND))
def test_interleavings_the_random_search_found(found: str) -> None:
    run_and_check(Setup(0, 1, "close", PRESSED), FOUND[found], rewind=True)
