"""Adversarial coverage of the engine's fast paths: the chain forward, padded contexts kept
across calls (`RowBatchItem.context_key`), plane-stored pool columns, per-request slot maps and
the one-write-per-round commit.

Every check is against full recompute: `TinyModel.full_forward` for rows a forward computes,
the greedy oracle for whole requests. The fast paths are exercised where they are easiest to
get wrong: keys reused across calls while batches reorder and contexts grow, shrink or are
rewritten; several engines (or both roles of one engine) sharing one model's work buffers;
independent drafts with their own layout; long prefixes restored hot; failures and
non-finite rows in the middle of a round.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.model as model_module
import engine.speculation.drafter as engine_module
from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from engine.model.fastpaths import buffers as buffers_module
from engine.model.fastpaths import forward as forward_module
from engine.model.fastpaths import groups as groups_module
from engine.model.fastpaths import padded as padded_module
from engine.rows import RowBatchItem, Rows
from tests.engine.helpers import (
    TOLERANCE,
    ManualClock,
    TrippingClock,
    Tripwire,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    check_live_prefixes,
    drain,
    events_of,
    install,
)
from tests.engine.model_helpers import bounded_prefill, chain_item, max_difference

COMMON = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the model: padded contexts kept across calls ------------------------------------------------


def level_item(first: RowBatchItem, rows: Rows, sequence: list[int], new: int) -> RowBatchItem:
    """A draft level: `new` chain rows after the rows an earlier call computed for `first`."""
    start = int(first.positions[-1]) + 1
    done = len(first.tokens)
    return RowBatchItem(
        context=first.context,
        local=first.local,
        local_positions=first.local_positions,
        tokens=np.array(sequence[start : start + new], dtype=np.int64),
        positions=np.arange(start, start + new),
        parents=np.arange(done, done + new) - 1,
        earlier=rows,
        earlier_positions=first.positions,
        earlier_parents=first.parents,
        earlier_full=np.ones(done, dtype=bool),
        context_key=first.context_key,
    )


@contextmanager
def work_buffers(mode: str) -> Iterator[None]:
    """ "shrunk at once": every work buffer shrinks on its first underused call and is dropped
    after one forward without use, so the rows kept across calls move between buffers all the
    time (see `WorkBuffers._shrink`). "grouped by length mod 3": a batch is computed in up to
    three groups of like lengths modulo 3 (see `length_groups`), so items move between groups
    and their buffers as they grow, and groups share a power of 4. "kept": as the engine
    runs."""
    if mode == "kept":
        yield
    elif mode == "grouped by length mod 3":
        with (
            patch.object(forward_module, "length_groups", groups_by_length_mod_3),
            patch.object(engine_module, "length_groups", groups_by_length_mod_3),
        ):
            yield
    else:
        with (
            patch.object(buffers_module, "SHRINK_AFTER", 1),
            patch.object(padded_module, "PADDED_ROWS", 1),
        ):
            yield


BUFFER_MODES = ["kept", "shrunk at once", "grouped by length mod 3"]


def groups_by_length_mod_3(batch: list[RowBatchItem]) -> list[list[int]]:
    lengths = [item.encoder_length + len(item.tokens) for item in batch]
    groups = [[i for i, n in enumerate(lengths) if n % 3 == rest] for rest in range(3)]
    return [group for group in groups if group]


@pytest.mark.parametrize("buffers", BUFFER_MODES)
@settings(max_examples=50, **COMMON)
@given(
    window=st.sampled_from([1, 2, 3, 40]),
    sequences=st.lists(
        st.lists(st.integers(0, 31), min_size=2, max_size=28), min_size=2, max_size=5
    ),
    data=st.data(),
)
def test_keyed_contexts_reused_across_calls_equal_full_recompute(
    buffers: str, window: int, sequences: list[list[int]], data: st.DataObject
) -> None:
    """Calls that reuse `context_key`s the way the engine does (a context only grows under one
    key; a rewrite takes a new key) while the batch reorders, shrinks and grows, with and
    without a context padded beforehand and shared with a second, draft-level call."""
    model = TinyModel(seed=len(sequences), window=window, width=8, depth=2)
    oracle = TinyModel(seed=len(sequences), window=window, width=8, depth=2)  # no buffers
    rewrites = [0] * len(sequences)
    stored = [data.draw(st.integers(1, len(s) - 1)) for s in sequences]
    with work_buffers(buffers):
        for _ in range(data.draw(st.integers(3, 10))):
            order = data.draw(st.permutations(range(len(sequences))))
            batch = order[: data.draw(st.integers(1, len(order)))]
            new = data.draw(st.integers(1, 3))
            more = data.draw(st.integers(1, 2))
            for i in batch:  # room for this call's rows: extend with arbitrary tokens
                while len(sequences[i]) < stored[i] + new + more:
                    sequences[i].append((7 * i + len(sequences[i])) % 32)
            items, fulls = [], []
            for i in batch:
                item, full = chain_item(
                    oracle,
                    tuple(sequences[i][: stored[i] + new]),
                    stored[i],
                    context_key=("seq", i, rewrites[i]),
                )
                items.append(item)
                fulls.append(full)
            shared = data.draw(st.booleans())
            context = model.batch_context(items, tail=new + more + 1) if shared else None
            outputs = model.forward_rows(items, context)
            for i, out, full in zip(batch, outputs, fulls):
                assert max_difference(out.data, full.data[stored[i] :]) < TOLERANCE
            levels = [
                level_item(item, out, sequences[i], more)
                for i, item, out in zip(batch, items, outputs)
            ]
            for i, out in zip(batch, model.forward_rows(levels, context)):
                start = stored[i] + new
                expected = oracle.full_forward(tuple(sequences[i][: start + more])).data[start:]
                assert max_difference(out.data, expected) < TOLERANCE
            for i in batch:
                if data.draw(st.integers(0, 5)) == 0 and stored[i] > 1:  # a rollback: new key
                    stored[i] = data.draw(st.integers(1, stored[i] - 1))
                    del sequences[i][stored[i] + 1 :]
                    rewrites[i] += 1
                else:
                    stored[i] += data.draw(st.integers(0, new + more))


@pytest.mark.parametrize("mode", ["mask", "compact"])
def test_bounded_prefills_in_a_uniform_batch_keep_their_bounds(mode: str) -> None:
    """A batch shaped like a chain round (same row count per item, all after their stored rows)
    whose items carry bounded-recovery limits must honour them: equal to full recompute under
    that mode, and (so the check has teeth) different from the exact rows."""
    model = TinyModel(seed=5, window=4, width=8, depth=2)
    keep = 4
    sequences = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8], [1] * 10]
    items, expected, exact = [], [], []
    for sequence in sequences:
        lower = len(sequence) - keep
        bounded = model.full_forward(tuple(sequence), mode=mode, keep=keep)
        key = ("bounded", tuple(sequence))
        items.append(bounded_prefill(model, sequence, lower, mode, context_key=key))
        expected.append(bounded.data)
        exact.append(model.full_forward(tuple(sequence)).data)
    for out, want, plain in zip(model.compute_rows(items), expected, exact):
        assert max_difference(out.data, want) < TOLERANCE
        assert max_difference(out.data, plain) > 1e-6


@pytest.mark.parametrize("window", [1, 2, 5, 8, 33, 40, 200])
@pytest.mark.parametrize("stored", [0, 3, 9, 50])
@pytest.mark.parametrize("items", [1, 3])
def test_long_chains_take_windowed_and_blocked_attention_exactly(
    window: int, stored: int, items: int
) -> None:
    """A long chain (a prefill) computes its local attention over sliding windows once its
    rows' windows lie inside the chain; its first rows (whose windows reach the stored rows,
    padded when the batch is ragged in window rows) take the masked path. A batch of them runs
    global attention in blocks of queries, each over the keys up to its last row. All must
    equal full recompute, for windows narrower and wider than the chain's head."""
    model = TinyModel(seed=11, window=window, width=8, depth=2, vocab_size=16)
    rng = np.random.default_rng(window * 100 + stored)
    new = 130  # long enough for the windowed path alone and for blocks in a batch of three
    batch, expected = [], []
    for index in range(items):
        # Ragged stored windows in a batch: each item stores a different number of rows.
        have = max(0, stored - 2 * index)
        tokens = tuple(int(t) for t in rng.integers(0, 16, have + new))
        item, full = chain_item(model, tokens, have)
        batch.append(item)
        expected.append(full.data[have:])
    for out, want in zip(model.compute_rows(batch), expected):
        assert max_difference(out.data, want) < TOLERANCE


@pytest.mark.parametrize("window", [1, 4, 12, 30])
def test_a_long_chain_after_earlier_rows_of_the_same_round_is_exact(window: int) -> None:
    """A long chain that follows rows an earlier call computed this round (k > 0): its
    windows may start among those rows, and its blocks reach past them."""
    model = TinyModel(seed=3, window=window, width=8, depth=2, vocab_size=16)
    tokens = tuple(int(t) for t in np.random.default_rng(window).integers(0, 16, 150))
    firsts, expected = [], []
    for shift in range(3):
        first, full = chain_item(model, tokens[shift:], 5)
        first = dataclasses.replace(
            first,
            tokens=first.tokens[:10],
            positions=first.positions[:10],
            parents=first.parents[:10],
        )
        firsts.append(first)
        expected.append(full.data[15:])
    earlier = model.compute_rows(firsts)
    levels = [
        level_item(first, rows, list(tokens[shift:]), 130)
        for shift, (first, rows) in enumerate(zip(firsts, earlier))
    ]
    for out, want in zip(model.compute_rows(levels), expected):
        assert max_difference(out.data, want[: len(out.data)]) < TOLERANCE


def test_rows_do_not_depend_on_which_positions_a_model_met_before() -> None:
    """Positional rows are computed once and kept: a model that first met far positions, or
    whose frequencies were replaced since, must compute exactly what a fresh model does."""
    tokens = tuple((3 * i) % 32 for i in range(40))
    far = tuple(i % 32 for i in range(700))
    fresh = TinyModel(seed=2, width=8, depth=2)
    seasoned = TinyModel(seed=2, width=8, depth=2)
    seasoned.full_forward(far)
    assert np.array_equal(seasoned.full_forward(tokens).data, fresh.full_forward(tokens).data)
    assert np.array_equal(seasoned.full_forward(far).data, fresh.full_forward(far).data)

    frequency = np.linspace(0.5, 2.5, 8)
    seasoned.weights = dataclasses.replace(seasoned.weights, frequency=frequency)
    replaced = TinyModel(seed=2, width=8, depth=2)
    replaced.weights = dataclasses.replace(replaced.weights, frequency=frequency)
    expected = replaced.full_forward(tokens).data
    assert np.array_equal(seasoned.full_forward(tokens).data, expected)
    assert not np.array_equal(expected, fresh.full_forward(tokens).data)


# -- engines: shared models, odd drafts, long restores -------------------------------------------


def submit_all(engine: Engine, prompts: list[tuple[list[int], int]]) -> list[str]:
    return [engine.submit(prompt, max_tokens=count) for prompt, count in prompts]


MIXED = [
    ([5, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9], 9),
    ([2, 7], 11),
    ([5, 3, 1, 4, 1, 5, 9], 7),
    ([0, 0, 1, 1, 2, 2, 3, 3, 4], 5),
    ([9], 8),
]


@pytest.mark.parametrize("draft_kind", ["close", "independent"])
def test_two_engines_sharing_one_model_interleave_exactly(draft_kind: str) -> None:
    """Both engines pad their contexts in the same model's work buffers (same request ids,
    same admission numbers); one also rolls back and undoes between the other's rounds."""
    target = TinyModel(seed=2, window=3, width=8, depth=2)
    draft = {
        "close": make_draft(target, seed=3),
        "independent": TinyModel(seed=4, window=2, width=8, depth=1),
    }[draft_kind]
    config = EngineConfig(max_active=4, draft_width=3, block_size=2)
    first = Engine(target, draft, config=config, clock=ManualClock())
    second = Engine(target, draft, config=config, clock=ManualClock())
    submit_all(first, MIXED)
    submit_all(second, list(reversed(MIXED)))
    for round_number in range(40):
        if first.idle and second.idle:
            break
        if not first.idle:
            first.step()
        if round_number == 3:
            first.rollback("request-1", 2)
            first.undo()
            check_live_prefixes(first)
        if not second.idle:
            second.step()
        check_block_invariants(first)
        check_block_invariants(second)
    assert first.idle and second.idle
    assert len(check_all_finished(first)) == len(check_all_finished(second)) == len(MIXED)


def test_a_model_drafting_for_itself_is_exact() -> None:
    """Target and draft are one object: both roles share its work buffers within a round."""
    target = TinyModel(seed=6, window=2, width=8, depth=2)
    for draft_context in (None, 3):
        config = EngineConfig(max_active=3, draft_width=3, draft_context=draft_context)
        engine = Engine(target, target, config=config, clock=ManualClock())
        submit_all(engine, MIXED)
        drain(engine)
        assert len(check_all_finished(engine)) == len(MIXED)


@pytest.mark.parametrize("draft_context", [None, 2, 5])
@pytest.mark.parametrize("block_size", [1, 4])
def test_an_independent_draft_with_its_own_layout_is_exact(
    draft_context: int | None, block_size: int
) -> None:
    """A draft of another width, depth and window keeps its own rows in the pool (its own
    planes and slot runs); rollbacks in between make it recompute what it had stored."""
    target = TinyModel(seed=8, window=3, width=8, depth=2)
    draft = TinyModel(seed=1, window=5, width=16, depth=1)
    config = EngineConfig(
        max_active=3,
        draft_width=3,
        draft_branching=2,
        block_size=block_size,
        draft_context=draft_context,
    )
    engine = Engine(target, draft, config=config, clock=ManualClock())
    ids = submit_all(engine, MIXED)
    for _ in range(4):
        engine.step()
    engine.rollback(ids[0], 3)
    engine.rollback(ids[2], 1)
    check_live_prefixes(engine)
    drain(engine)
    assert len(check_all_finished(engine)) == len(MIXED)


LONG = [(5 * i + i // 7) % 32 for i in range(290)]


@pytest.mark.parametrize("draft_kind", ["none", "close"])
def test_a_long_prefix_restored_hot_beside_short_requests_is_exact(draft_kind: str) -> None:
    """A prefix longer than a prefill chunk comes back hot and is decoded in one batch with
    short requests; it is then interrupted mid-round, rolled back and undone."""
    target = TinyModel(seed=3, window=4, width=8, depth=2)
    draft = make_draft(target, seed=4) if draft_kind == "close" else None
    clock = TrippingClock()
    config = EngineConfig(max_active=3, draft_width=2, block_size=16, num_blocks=64)
    engine = Engine(target, draft, config=config, clock=clock)
    engine.generate(LONG, max_tokens=2)
    long_id = engine.submit([*LONG, 4, 4], max_tokens=8)
    short = submit_all(engine, [([1, 2], 8), ([7, 7, 7, 7, 7], 6)])
    events = engine.step()
    restores = [e for e in events_of(events, "restore") if e["request_id"] == long_id]
    assert restores and restores[0]["cache"] == "hot"
    engine.step()
    unwire = install(engine, clock, "target forward", Tripwire(1))
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    unwire()
    engine.step()
    engine.rollback(long_id, 2)
    engine.step()
    engine.undo()
    check_live_prefixes(engine)
    drain(engine)
    for rid in (long_id, *short):
        check_against_oracle(engine, rid)


def test_a_finished_request_keeps_its_state_after_its_blocks_are_reused() -> None:
    """A finishing request copies its rows out once; later requests then overwrite the very
    blocks they came from, and its committed state must not follow them."""
    target = TinyModel(seed=9, window=2, width=8, depth=2)
    config = EngineConfig(block_size=2, num_blocks=8, undo_depth=0, cache_capacity=1)
    clock = ManualClock()
    engine = Engine(target, make_draft(target, seed=1), config=config, clock=clock)
    early = engine.submit([3, 1, 4, 1, 5], max_tokens=4)
    drain(engine)
    clock.advance(1000.0)  # its cache entry expires: the blocks go back to the pool
    later = submit_all(engine, [([9, 9, 8, 8, 7], 5), ([2, 6, 2, 6], 6)])
    drain(engine)
    for rid in (early, *later):
        check_against_oracle(engine, rid)


def test_an_id_reused_after_undo_never_sees_the_undone_requests_rows() -> None:
    """Undo can forget a request that had decoded; the next submission then gets its id and
    its admission number back, with other tokens: rows padded for the forgotten one must not
    be reused for it."""
    target = TinyModel(seed=4, window=2, width=8, depth=2)
    config = EngineConfig(max_active=2, block_size=4)
    engine = Engine(target, config=config, clock=ManualClock())
    first = engine.submit([1, 2, 3], max_tokens=8)
    engine.step()
    forgotten = engine.submit([9, 8, 7, 6, 5, 4, 3, 2], max_tokens=8)
    engine.step()
    engine.step()  # both decode: the forgotten request's rows are padded beside the first's
    for _ in range(3):
        engine.undo()
    assert forgotten not in [view["id"] for view in engine.snapshot()["requests"]]
    reused = engine.submit([5, 5, 1, 1, 0, 0, 7, 7], max_tokens=8)
    assert reused == forgotten
    drain(engine)
    check_against_oracle(engine, first)
    check_against_oracle(engine, reused)


# -- engines: random interleavings over contexts of different lengths ---------------------------

# Prompts are a cut of one base sequence plus a few tokens of their own, so that they share
# prefixes: cache restores, shared blocks and copy-on-write happen inside the interleavings.
BASE = [(11 * i + i // 3) % 32 for i in range(30)]
PROMPT = st.builds(
    lambda cut, own: BASE[:cut] + own or [0],
    st.integers(0, len(BASE)),
    st.lists(st.integers(0, 31), max_size=6),
)
OPERATION = st.one_of(
    st.tuples(st.just("submit"), PROMPT, st.integers(0, 10)),
    st.tuples(st.just("step")),
    st.tuples(st.just("step")),
    st.tuples(st.just("step")),
    st.tuples(st.just("cancel"), st.integers(0, 9)),
    st.tuples(st.just("rollback"), st.integers(0, 9), st.integers(1, 4)),
    st.tuples(st.just("undo")),
    st.tuples(st.just("clock"), st.sampled_from([1.0, 4.0, 200.0])),
    st.tuples(
        st.just("interrupt"),
        st.sampled_from(["target forward", "draft forward", "allocate"]),
        st.integers(1, 2),
    ),
)


@dataclasses.dataclass(frozen=True)
class Setup:
    window: int
    draft: str
    config: dict[str, Any]

    def build(self, clock: TrippingClock) -> Engine:
        target = TinyModel(seed=self.window, window=self.window, width=8, depth=2)
        draft = {
            "none": None,
            "close": make_draft(target, seed=1, noise=0.5),
            "independent": TinyModel(seed=7, window=2, width=16, depth=1),
        }[self.draft]
        return Engine(target, draft, config=EngineConfig(**self.config), clock=clock)


SETUPS = st.builds(
    Setup,
    window=st.sampled_from([1, 2, 5, 64]),
    draft=st.sampled_from(["none", "close", "independent"]),
    config=st.fixed_dictionaries(
        dict(
            max_active=st.integers(2, 5),
            draft_width=st.integers(1, 4),
            draft_branching=st.sampled_from([1, 1, 2]),
            max_batch_tokens=st.integers(4, 24),
            block_size=st.sampled_from([1, 2, 4, 16]),
            num_blocks=st.sampled_from([12, 24, 512]),
            draft_context=st.sampled_from([None, None, 2, 6]),
            cache_capacity=st.sampled_from([2, 64]),
        )
    ),
)


@settings(max_examples=120, **COMMON)
@given(
    setup=SETUPS,
    first=st.lists(st.tuples(PROMPT, st.integers(1, 10)), min_size=2, max_size=5),
    operations=st.lists(OPERATION, min_size=8, max_size=30),
)
def test_interleavings_over_contexts_of_different_lengths_stay_exact(
    setup: Setup, first: list[tuple[list[int], int]], operations: list[tuple[Any, ...]]
) -> None:
    """Requests of very different lengths share rounds, so padded contexts are ragged, and a
    request finishing, being deferred, preempted, cancelled or rolled back shifts the others
    to other batch slots between rounds."""
    run_interleaving(setup, first, operations)


@settings(max_examples=50, **COMMON)
@given(
    setup=SETUPS,
    first=st.lists(st.tuples(PROMPT, st.integers(1, 10)), min_size=2, max_size=5),
    operations=st.lists(OPERATION, min_size=8, max_size=30),
)
@pytest.mark.parametrize("buffers", BUFFER_MODES[1:])
def test_interleavings_stay_exact_while_work_buffers_shrink_and_go(
    buffers: str,
    setup: Setup,
    first: list[tuple[list[int], int]],
    operations: list[tuple[Any, ...]],
) -> None:
    with work_buffers(buffers):
        run_interleaving(setup, first, operations)


def run_interleaving(
    setup: Setup, first: list[tuple[list[int], int]], operations: list[tuple[Any, ...]]
) -> None:
    clock = TrippingClock()
    engine = setup.build(clock)
    for prompt, max_tokens in first:
        try:
            engine.submit(prompt, max_tokens=max_tokens)
        except ValueError as error:  # a prompt that can never fit the pool
            assert "blocks" in str(error)
    for operation in operations:
        kind = operation[0]
        ids = [view["id"] for view in engine.snapshot()["requests"]]
        if kind == "submit":
            try:
                engine.submit(operation[1], max_tokens=operation[2])
            except ValueError as error:  # a prompt that can never fit the pool
                assert "blocks" in str(error)
        elif kind == "step":
            engine.step()
        elif kind == "cancel" and ids:
            engine.cancel(ids[operation[1] % len(ids)])
        elif kind == "rollback" and ids:
            try:
                engine.rollback(ids[operation[1] % len(ids)], operation[2])
            except ValueError as error:
                assert "cannot roll back" in str(error)
            check_live_prefixes(engine)
        elif kind == "undo" and engine.undo_available:
            engine.undo()
            check_live_prefixes(engine)
        elif kind == "clock":
            clock.advance(operation[1])
        elif kind == "interrupt":
            where = operation[1]
            if where == "draft forward" and engine.draft is None:
                where = "target forward"
            unwire = install(engine, clock, where, Tripwire(operation[2]))
            try:
                engine.step()
            except KeyboardInterrupt:
                pass
            finally:
                unwire()
            check_live_prefixes(engine)
        check_block_invariants(engine)
    drain(engine, max_steps=800)
    check_all_finished(engine)


def test_a_work_buffer_no_forward_uses_goes_and_comes_back_exact() -> None:
    model = TinyModel(seed=2)
    oracle = TinyModel(seed=2)
    tokens = tuple(i % 32 for i in range(1408))
    full = oracle.full_forward(tokens)
    # Chains of one and two rows: not one shape, so they take the padded "globals" path.
    longs = [
        chain_item(oracle, tokens[: 1400 + i], 1399 + i - i % 2, context_key=i, full=full)[0]
        for i in range(8)
    ]
    short, _ = chain_item(oracle, tokens[:12], 11)
    tracemalloc.start()
    try:
        model.forward_rows(longs)
        grown, _ = tracemalloc.get_traced_memory()
        for _ in range(buffers_module.SHRINK_AFTER + 1):  # decode steps: no padded buffer
            model.forward_rows([short])
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert grown > 5e6  # 8 x 4 planes x 1407 rows x 16 x 8 bytes
    assert after < 1e6, (grown, after)
    # The kept rows went with the buffer: the same keys gather their contexts again.
    for item, rows in zip(longs, model.forward_rows(longs)):
        assert max_difference(rows.data, full.data[item.positions]) < TOLERANCE


@pytest.mark.parametrize("between", ["two short contexts", "no padded call"])
def test_rows_kept_for_batch_slots_survive_a_shrink_and_a_regrow(between: str) -> None:
    # Five 40-row contexts are padded and kept. Two short ones then shrink the buffer to
    # 4 slots x 10 rows: slots 2-3 keep 10 of their rows, slot 4 none. (With no padded call
    # for two forwards, the buffer goes.) The five come back with the same keys.
    model = TinyModel(seed=4, width=8, depth=2)
    oracle = TinyModel(seed=4, width=8, depth=2)
    tokens = tuple((5 * i) % 32 for i in range(48))
    full = oracle.full_forward(tokens)
    fives = [
        chain_item(oracle, tokens[: 41 + i], 40 + i, context_key=i, full=full)[0] for i in range(5)
    ]
    shorts = [chain_item(oracle, tokens[:5], 4, context_key=f"short {i}")[0] for i in range(2)]
    with work_buffers("shrunk at once"):
        model.forward_rows(fives)
        if between == "two short contexts":
            model.forward_rows(shorts)
        else:
            model.forward_rows(shorts[:1])  # a lone decode step pads nothing
            model.forward_rows(shorts[:1])
        for item, rows in zip(fives, model.forward_rows(fives)):
            assert max_difference(rows.data, full.data[item.positions]) < TOLERANCE


def rounds_traced(long_prompt: int, *, grouped: bool = True) -> tuple[int, int, Engine]:
    """Traced memory after a long prompt's first rounds among 16 short requests, and again
    SHRINK_AFTER + 2 rounds after it was cancelled; and the engine. `grouped=False`: the
    batch is never cut into length groups (so the long context pads every item)."""
    tracemalloc.start()
    try:
        with patch.object(groups_module, "GROUP_ROWS", 512 if grouped else 10**9):
            engine = Engine(
                TinyModel(seed=3),
                config=EngineConfig(max_active=17, num_blocks=400, block_size=16),
                clock=ManualClock(),
            )
            for i in range(16):
                engine.submit([i, 1, 2, 3], max_tokens=2 * buffers_module.SHRINK_AFTER + 8)
            long = engine.submit([i % 32 for i in range(long_prompt)], max_tokens=8)
            for _ in range(3):
                engine.step()
            grown, _ = tracemalloc.get_traced_memory()
            engine.cancel(long)
            for _ in range(buffers_module.SHRINK_AFTER + 2):
                engine.step()
            after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return grown, after, engine


def test_work_buffers_give_memory_back_after_a_long_request_leaves_the_batch() -> None:
    # Computed as one batch, one long prompt among short requests grows the padded buffer to
    # batch x its context (16 x 4 planes x 2402 rows x 16 x 8 bytes = 20 MB); after it has
    # gone, the buffer shrinks back to what the same engine holds when it never saw it.
    grown, after, engine = rounds_traced(1200, grouped=False)
    _, plain, _ = rounds_traced(1, grouped=False)
    assert grown - plain > 10e6, (grown, plain)
    assert after - plain < 3e6, (after, plain)
    drain(engine)
    check_all_finished(engine)


@pytest.mark.parametrize(
    ("lengths", "groups"),
    [
        ([20, 30, 4000, 25], [[0, 1, 3], [2]]),  # one long history among short ones
        ([600, 700, 650], [[0, 1, 2]]),  # like lengths: one forward
        ([10, 400, 30], [[0, 1, 2]]),  # 40x apart, but padding 400 rows costs little
        ([10, 2000, 600, 9000], [[0], [1, 2], [3]]),
    ],
)
def test_length_groups_cut_only_where_padding_would_cost(
    lengths: list[int], groups: list[list[int]]
) -> None:
    layout = TinyModel(seed=1).layout
    batch = [
        RowBatchItem(  # only the lengths matter: n stored rows, one new row
            context=Rows(np.zeros((n, layout.size)), layout),
            local=Rows.empty(layout),
            local_positions=np.arange(0),
            tokens=np.array([1]),
            positions=np.array([n]),
            parents=np.array([-1]),
        )
        for n in lengths
    ]
    assert model_module.length_groups(batch) == groups


@pytest.mark.parametrize(
    ("items", "groups"),
    [
        # Two decode steps beside two prefill chunks (issue 26's scenario, round 10): padded
        # together, the steps computed 223 rows against 1,842 keys.
        ([(208, 198), (1616, 3), (624, 3), (0, 223)], [[1, 2], [0, 3]]),
        ([(100, 1), (120, 5), (90, 30)], [[0, 1, 2]]),  # a few rows: padding them costs little
        # 64-row prefill chunks beside decode steps over short contexts (the batch workload):
        # 16 x 64 x 130 pairs padded cost less than a second forward.
        ([(60, 2)] * 15 + [(0, 64)], [list(range(16))]),
        ([(100, 1), (3000, 2), (100, 200)], [[0], [1], [2]]),  # rows apart, then lengths
    ],
)
def test_length_groups_cut_decode_steps_apart_from_prefill_chunks(
    items: list[tuple[int, int]], groups: list[list[int]]
) -> None:
    layout = TinyModel(seed=1).layout
    batch = [
        RowBatchItem(  # n stored rows, `rows` new ones in a chain
            context=Rows(np.zeros((n, layout.size)), layout),
            local=Rows.empty(layout),
            local_positions=np.arange(0),
            tokens=np.ones(rows, dtype=np.int64),
            positions=np.arange(n, n + rows),
            parents=np.arange(rows) - 1,
        )
        for n, rows in items
    ]
    assert model_module.length_groups(batch) == groups


def test_a_long_context_is_computed_apart_from_short_ones() -> None:
    # In length groups the short requests never pad to the long one's context.
    apart, _, engine = rounds_traced(1200)
    together, _, _ = rounds_traced(1200, grouped=False)
    assert together - apart > 10e6, (together, apart)
    drain(engine)
    check_all_finished(engine)


# -- failures in the middle of a round ------------------------------------------------------------


def test_a_draft_failing_after_its_first_level_finishes_only_that_request() -> None:
    target = TinyModel(seed=3)
    draft = make_draft(target, seed=4)
    engine = Engine(target, draft, config=EngineConfig(draft_width=3), clock=ManualClock())
    original = draft.forward_rows

    def forward_rows(batch: list[RowBatchItem], *args: Any, **kwargs: Any) -> Any:
        # Levels after the first carry rows computed earlier this round; fail the short
        # request's (its stored context stays under 9 positions, the healthy one's never does).
        if any(len(item.earlier_positions) and len(item.context) < 9 for item in batch):
            raise RuntimeError("injected draft failure")
        return original(batch, *args, **kwargs)

    draft.forward_rows = forward_rows  # type: ignore[method-assign]
    healthy = engine.submit([4, 5, 6, 7, 1, 2, 9, 9, 8, 7], max_tokens=6)
    failing = engine.submit([1, 2, 3], max_tokens=6)
    results = {r.request_id: r for r in engine.run(raise_on_error=False)}
    assert results[failing].finish_reason == "error"
    check_against_oracle(engine, healthy)


def test_non_finite_draft_rows_do_not_poison_a_healthy_request() -> None:
    clean = TinyModel(seed=0, window=2, width=8, depth=2)
    long_prompt = [26, 18, 30, 13, 30, 11, 15, 0, 0, 23, 27, 4, 9, 14, 14, 2, 27, 26, 28, 2, 21]
    poisoned_prompt = [23, 1, 9, 5, 7, 1, 29, 10]
    short_prompt = [25, 31, 9]
    healthy = {
        "long": greedy_generate(clean, long_prompt, max_tokens=10).tokens,
        "short": greedy_generate(clean, short_prompt, max_tokens=10).tokens,
    }
    # The poisoned request's first token is one no healthy request ever reads.
    bad = greedy_generate(clean, poisoned_prompt, max_tokens=1).tokens[0]
    unseen = {*long_prompt, *short_prompt, *poisoned_prompt, *healthy["long"], *healthy["short"]}
    assert bad not in unseen
    embedding = clean.weights.embedding.copy()
    embedding[bad] = np.nan
    target = TinyModel(seed=0, window=2, width=8, depth=2)
    target.weights = dataclasses.replace(clean.weights, embedding=embedding)
    # A copy draft proposes only tokens the target would pick: the poisoned row is first met
    # by the draft, when it catches up to the poisoned request's pending token.
    draft = make_draft(target, depth=target.depth, noise=0.0)
    config = EngineConfig(max_active=3, draft_width=1, block_size=4)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    long_id = engine.submit(long_prompt, max_tokens=10)
    poisoned_id = engine.submit(poisoned_prompt, max_tokens=10)
    short_id = engine.submit(short_prompt, max_tokens=10)
    engine.run(raise_on_error=False)
    assert engine.result(poisoned_id).finish_reason == "error"
    for rid, name in ((long_id, "long"), (short_id, "short")):
        result = engine.result(rid)
        assert (result.finish_reason, result.error) == ("length", None), result
        assert result.tokens == healthy[name]


def test_an_interrupted_round_leaves_no_non_finite_rows_behind() -> None:
    """Ctrl-C can land after a forward wrote a poisoned request's NaN rows into the model's
    work buffers and before the round checked them; the rewound engine must not hand those
    rows to later, healthy requests (padding rows are reused and masked by adding to them)."""
    clean = TinyModel(seed=0, window=5, width=8, depth=2)
    prompts = [[5], [6, 7, 8, 9, 10, 11]]
    healthy = [greedy_generate(clean, prompt, max_tokens=4).tokens for prompt in prompts]
    bad = 31
    assert all(bad not in prompt + list(tokens) for prompt, tokens in zip(prompts, healthy))
    embedding = clean.weights.embedding.copy()
    embedding[bad] = np.nan
    target = TinyModel(seed=0, window=5, width=8, depth=2)
    target.weights = dataclasses.replace(clean.weights, embedding=embedding)
    engine = Engine(target, config=EngineConfig(max_active=4), clock=ManualClock())
    first = [engine.submit([bad] * 4, max_tokens=3), engine.submit([1, 2, 3, 4], max_tokens=3)]
    original = target.forward_rows

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)  # the rows are in the buffers...
        raise KeyboardInterrupt  # ...and the round is interrupted before it looks at them

    target.forward_rows = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        engine.step()
    del target.forward_rows
    for request_id in first:
        engine.cancel(request_id)
    later = [engine.submit(prompt, max_tokens=4) for prompt in prompts]
    engine.run(raise_on_error=False)
    for request_id, tokens in zip(later, healthy):
        result = engine.result(request_id)
        assert (result.finish_reason, result.error) == ("length", None), result
        assert result.tokens == tokens
