"""TinyModel: the incremental, tree-masked, batched forward equals full recompute; identity;
the draft's agreement; varied outputs.

`forward_rows` is driven directly here with hand-built batch items (the engine's own plumbing
is tested through the engine elsewhere). A row computed incrementally must equal the row
`full_forward` computes for the same token path within 1e-10.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from engine.rows import RowBatchItem
from tests.engine.helpers import TOLERANCE, ManualClock, check_all_finished, drain
from tests.engine.model_helpers import chain_item, max_difference, replay_item

TOKENS = (5, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5)


@pytest.mark.parametrize("window", [1, 2, 4, 8])
@pytest.mark.parametrize("stored", [0, 1, 5, 11])
def test_incremental_rows_equal_full_recompute(window: int, stored: int) -> None:
    model = TinyModel(seed=3, window=window)
    full = model.full_forward(TOKENS)
    (out,) = model.forward_rows([chain_item(model, TOKENS, stored)[0]])
    assert max_difference(out.data, full.data[stored:]) < TOLERANCE


def test_forward_rows_counts_calls_and_compute_rows_does_not() -> None:
    model = TinyModel(seed=1)
    item, _ = chain_item(model, TOKENS, 4)
    model.forward_rows([item, item])
    model.compute_rows([item])
    assert model.forward_calls == 1


@pytest.mark.parametrize("window", [1, 2, 4])
def test_tree_rows_see_only_their_ancestors(window: int) -> None:
    """A tree after a committed prefix: every node equals the full forward of its own path."""
    model = TinyModel(seed=5, window=window)
    prefix = TOKENS[:6]  # committed; position 5 is the root (recomputed, like the engine does)
    # node: (parent row, token); rows are in breadth-first order.
    nodes = [(-1, prefix[-1]), (0, 7), (0, 8), (0, 9), (1, 10), (1, 11), (2, 12), (4, 13)]
    paths: list[tuple[int, ...]] = []
    for parent, token in nodes:
        paths.append((*(paths[parent] if parent >= 0 else prefix[:-1]), token))
    stored = len(prefix) - 1
    full = model.full_forward(prefix)
    local_start = max(0, stored - window + 1)
    item = RowBatchItem(
        context=full.take(slice(0, stored)),
        local=full.take(slice(local_start, stored)),
        local_positions=np.arange(local_start, stored),
        tokens=np.array([token for _, token in nodes]),
        positions=np.array([len(path) - 1 for path in paths]),
        parents=np.array([parent for parent, _ in nodes]),
    )
    (out,) = model.forward_rows([item])
    for row, path in enumerate(paths):
        expected = model.full_forward(path).data[-1]
        assert max_difference(out.data[row], expected) < TOLERANCE, f"node {row} path {path}"


def test_a_later_call_extends_rows_of_an_earlier_call() -> None:
    """The draft grows a tree level by level: each call sees the earlier levels' rows."""
    model = TinyModel(seed=6)
    prefix = TOKENS[:5]
    first, _ = chain_item(model, prefix, 2)  # rows 2..4 (the root is position 4)
    (out,) = model.forward_rows([first])
    level = RowBatchItem(
        context=first.context,
        local=first.local,
        local_positions=first.local_positions,
        tokens=np.array([20, 21]),
        positions=np.array([5, 5]),
        parents=np.array([2, 2]),  # both children of the root, the third earlier row
        earlier=out,
        earlier_positions=first.positions,
        earlier_parents=first.parents,
        earlier_full=np.ones(len(first.positions), dtype=bool),
    )
    (children,) = model.forward_rows([level])
    for row, token in enumerate((20, 21)):
        expected = model.full_forward((*prefix, token)).data[-1]
        assert max_difference(children.data[row], expected) < TOLERANCE


@pytest.mark.parametrize(("encoder", "consumer"), [(6, 0), (6, 3), (11, 2)])
def test_replay_rows_rebuild_the_consumers_over_stored_encoder_rows(
    encoder: int, consumer: int
) -> None:
    """A warm restore: the encoder side of [0, encoder) is stored, consumers are replayed."""
    model = TinyModel(seed=8, window=4)
    full = model.full_forward(TOKENS)
    layout = model.layout
    (out,) = model.forward_rows([replay_item(model, TOKENS, full, encoder, consumer)])
    expected = full.data[consumer:]
    replay = encoder - consumer
    consumer_part = slice(layout.local.start, layout.logits.stop)  # local K/V and logits
    assert max_difference(out.data[:replay, consumer_part], expected[:replay, consumer_part]) < (
        TOLERANCE
    )
    assert max_difference(out.data[replay:], expected[replay:]) < TOLERANCE


def test_a_batch_of_different_lengths_equals_each_item_alone() -> None:
    model = TinyModel(seed=2, window=2)
    sequences = [TOKENS, TOKENS[:3], (7, 7, 7, 1, 2, 3, 4, 5, 6), (4,)]
    stored = [8, 0, 2, 0]
    items = [chain_item(model, s, c)[0] for s, c in zip(sequences, stored)]
    batched = model.forward_rows(items)
    assert model.forward_calls == 1
    for item, sequence, start, out in zip(items, sequences, stored, batched):
        alone = model.compute_rows([item])[0]
        assert max_difference(out.data, alone.data) < TOLERANCE
        assert max_difference(out.data, model.full_forward(sequence).data[start:]) < TOLERANCE


def test_a_long_prefill_in_chunks_equals_full_recompute() -> None:
    model = TinyModel(seed=4)
    rng = np.random.default_rng(0)
    tokens = tuple(int(t) for t in rng.integers(0, 32, 600))
    full = model.full_forward(tokens)
    for stored in (0, 123):
        (out,) = model.compute_rows([chain_item(model, tokens, stored)[0]])
        assert max_difference(out.data, full.data[stored:]) < TOLERANCE


def test_the_oracle_state_matches_full_forward_rows() -> None:
    model = TinyModel(seed=2, window=3)
    generation = greedy_generate(model, TOKENS[:4], max_tokens=5)
    sequence = (*TOKENS[:4], *generation.tokens)
    full = model.full_forward(sequence)
    assert generation.state.tokens == sequence
    assert max_difference(generation.state.logits, full.logits[-1]) < TOLERANCE
    assert int(np.argmax(model.full_forward(sequence[:-1]).logits[-1])) == sequence[-1]
    for layer in range(model.depth):
        assert generation.state.local_keys[layer].shape == (3, model.width)


# -- identity ------------------------------------------------------------------------------------


def test_identity_follows_the_weights_and_layout() -> None:
    target = TinyModel(seed=7)
    identity = target.identity
    assert TinyModel(seed=7).identity == identity  # same seed, same weights
    assert TinyModel(seed=8).identity != identity
    assert TinyModel(seed=7, window=2).identity != identity
    assert TinyModel(seed=7, depth=2).identity != identity
    greedy_generate(target, [1, 2, 3], max_tokens=4)  # running the model changes nothing
    assert target.identity == identity
    assert make_draft(target, seed=8).identity != identity
    # A noiseless full-depth draft *is* the target, parameter for parameter.
    assert make_draft(target, depth=target.depth, noise=0.0).identity == identity


def test_identity_changes_when_weights_are_replaced_and_returns_with_them() -> None:
    model = TinyModel(seed=7)
    original, identity = model.weights, model.identity
    model.weights = dataclasses.replace(original, head=original.head + 1e-9)
    assert model.identity != identity
    model.weights = original
    assert model.identity == identity


def test_weights_cannot_change_in_place_behind_the_identity() -> None:
    model = TinyModel(seed=7)
    with pytest.raises(ValueError):
        model.weights.head[0, 0] = 1.0
    with pytest.raises(ValueError):
        model.weights.layers[0][0][0, 0] = 1.0


# -- the draft and the outputs -------------------------------------------------------------------

PROMPTS = ([1, 2, 3, 4], [1, 2, 3, 4, 5], [9, 8, 7], [5, 3, 1], [2, 7, 1, 8, 2, 8])


def acceptance(target: TinyModel, draft: TinyModel, config: EngineConfig) -> dict[str, Any]:
    engine = Engine(target, draft, config=config, clock=ManualClock())
    for prompt in PROMPTS:
        engine.submit(prompt, max_tokens=16)
    drain(engine)
    check_all_finished(engine)
    snapshot = engine.snapshot()
    return {"reported": snapshot["acceptance"], **snapshot["metrics"]["drafts"]}


def test_the_default_draft_agrees_with_its_target_often_but_not_always() -> None:
    """The demo's models (target seed 7, draft seed 8) with EngineConfig defaults: of the
    drafted tokens the target checked, between 40% and 90% are accepted."""
    target = TinyModel(seed=7)
    drafts = acceptance(target, make_draft(target, seed=8), EngineConfig())
    assert 0.4 <= drafts["accepted"] / drafts["verified"] <= 0.9, drafts


def test_default_drafts_agree_between_40_and_90_percent_on_average() -> None:
    rates = []
    for seed in range(6):
        drafts = acceptance(TinyModel(seed=seed), make_draft(TinyModel(seed=seed)), EngineConfig())
        assert drafts["reported"] == drafts["accepted"] / drafts["verified"]
        rates.append(drafts["reported"])
    assert 0.4 <= sum(rates) / len(rates) <= 0.9, rates


def test_the_default_demo_reports_an_acceptance_between_40_and_90_percent() -> None:
    """The default scenario's models, settings and requests, replayed on the engine alone."""
    target = TinyModel(seed=7)
    config = EngineConfig(
        max_batch_tokens=8,
        max_active=4,
        draft_width=4,
        draft_branching=2,
        max_draft_nodes=6,
        block_size=4,
        num_blocks=48,
        cost_curve=((2, 1.0), (4, 1.1), (8, 1.3)),
    )
    clock = ManualClock()
    engine = Engine(target, make_draft(target, seed=8), config=config, clock=clock)
    engine.submit([1, 2, 3, 4], max_tokens=8)
    engine.step()
    engine.submit([1, 2, 3, 4, 5], max_tokens=5)
    engine.cancel(engine.submit([9, 8, 7], max_tokens=4))
    drain(engine)
    engine.generate([1, 2, 3, 4], max_tokens=4)
    clock.now = 3.0
    engine.generate([1, 2, 3, 4, 6], max_tokens=4)
    clock.now = 200.0
    engine.generate([1, 2, 3, 4], max_tokens=4)
    check_all_finished(engine)
    snapshot = engine.snapshot()
    drafts = snapshot["metrics"]["drafts"]
    # Acceptance counts only the drafts the target verified, not tree nodes left unverified.
    assert snapshot["acceptance"] == drafts["accepted"] / drafts["verified"]
    assert drafts["verified"] < drafts["proposed"]
    assert 0.4 <= snapshot["acceptance"] <= 0.9, drafts


def test_more_noise_means_less_agreement() -> None:
    target = TinyModel(seed=7)
    config = EngineConfig()
    close = acceptance(target, make_draft(target, seed=8, noise=0.0), config)["reported"]
    noisy = acceptance(target, make_draft(target, seed=8, noise=2.0), config)["reported"]
    assert close > noisy


def test_an_independent_random_draft_is_rarely_right_and_still_exact() -> None:
    target = TinyModel(seed=7)
    drafts = acceptance(target, TinyModel(seed=99, depth=1), EngineConfig())
    assert drafts["proposed"] > 0
    assert drafts["reported"] < 0.25, drafts


def test_greedy_outputs_are_varied() -> None:
    demo = TinyModel(seed=7)
    for prompt in PROMPTS:
        tokens = greedy_generate(demo, prompt, max_tokens=16).tokens
        assert len(set(tokens)) > 8, (prompt, tokens)
    for seed in range(10):  # no seed collapses into a few repeated tokens
        model = TinyModel(seed=seed)
        for prompt in PROMPTS[:3]:
            assert len(set(greedy_generate(model, prompt, max_tokens=16).tokens)) >= 6


def test_a_chunked_prefill_keeps_stored_window_rows_beyond_one_chunk() -> None:
    # A window wider than a prefill chunk: later chunks must still see the restored rows.
    from engine import Engine, EngineConfig

    target = TinyModel(seed=1, window=260, width=8, depth=2)
    engine = Engine(target, config=EngineConfig(block_size=16), clock=lambda: 0.0)
    engine.generate([1, 2, 3, 4], max_tokens=1)  # publishes a hot cursor over [1, 2, 3, 4]
    rid = engine.submit([1, 2, 3, 4] + [i % 32 for i in range(300)], max_tokens=1)
    engine.run()
    assert engine.snapshot()["requests"][-1]["restore"]["cache"] == "hot"
    oracle = greedy_generate(target, engine.result(rid).prompt, max_tokens=1)
    assert engine.result(rid).tokens == oracle.tokens
    assert engine.committed_state(rid).max_error(oracle.state) < 1e-10


@pytest.mark.parametrize("new_rows", [1, 3])
@pytest.mark.parametrize("shared_context", [False, True])
def test_uniform_chains_with_earlier_rows_equal_full_recompute(
    new_rows: int, shared_context: bool
) -> None:
    """The shape of most rounds: each request adds the same number of chain rows after rows
    an earlier call computed (a draft level), over stored contexts of different lengths,
    padded once (optionally a context built beforehand and shared, as the engine does)."""
    model = TinyModel(seed=9, window=3)
    sequences = [TOKENS, TOKENS[:7], (7, 7, 1, 2, 3, 4, 5, 6, 2)]
    stored = [6, 2, 4]
    firsts = [chain_item(model, s[: c + 1], c)[0] for s, c in zip(sequences, stored)]
    earlier = model.forward_rows(firsts)  # one row each: the pending positions
    levels = [
        RowBatchItem(
            context=first.context,
            local=first.local,
            local_positions=first.local_positions,
            tokens=np.array(sequence[start + 1 : start + 1 + new_rows]),
            positions=np.arange(start + 1, start + 1 + new_rows),
            parents=np.arange(new_rows),  # row 0 hangs off the earlier row
            earlier=rows,
            earlier_positions=first.positions,
            earlier_parents=first.parents,
            earlier_full=np.ones(1, dtype=bool),
        )
        for first, rows, sequence, start in zip(firsts, earlier, sequences, stored)
    ]
    context = model.batch_context(levels, tail=8) if shared_context else None
    outputs = model.forward_rows(levels, context)
    for out, sequence, start in zip(outputs, sequences, stored):
        expected = model.full_forward(sequence[: start + 1 + new_rows]).data[start + 1 :]
        assert max_difference(out.data, expected) < TOLERANCE


# A second draft level (one earlier row, one new row) that breaks the chain in one way: the
# forward must see it and take the general path (the chain path would attend wrongly).
NOT_A_CHAIN = {
    "a sibling of the earlier row": dict(position=0, parent=-1),
    "hanging off the stored rows past a gap": dict(position=1, parent=-1),
    "a child two positions on": dict(position=2, parent=0),
    "an earlier row that is a replay": dict(earlier_full=False),
    "stored rows reaching past the new row": dict(stored_beyond=2),
}


@pytest.mark.parametrize("case", NOT_A_CHAIN)
def test_a_second_level_that_is_not_a_chain_takes_the_general_path(case: str) -> None:
    change = NOT_A_CHAIN[case]
    model = TinyModel(seed=9, window=2)
    general = TinyModel(seed=9, window=2)  # separate work buffers
    sequences = [TOKENS, (7, 7, 1, 2, 3, 4, 5, 6, 2)]
    stored = [6, 4]
    firsts = [chain_item(model, s[: c + 1], c)[0] for s, c in zip(sequences, stored)]
    earlier = model.forward_rows(firsts)
    levels = []
    for first, rows, sequence, start in zip(firsts, earlier, sequences, stored):
        context = first.context
        if "stored_beyond" in change:  # stored rows also at and after the new row's position
            context = model.full_forward(sequence[: start + 1 + change["stored_beyond"]])
        levels.append(
            RowBatchItem(
                context=context,
                local=first.local,
                local_positions=first.local_positions,
                tokens=np.array(sequence[start + 1 : start + 2]),
                positions=np.array([start + change.get("position", 1)]),
                parents=np.array([change.get("parent", 0)]),
                earlier=rows,
                earlier_positions=first.positions,
                earlier_parents=first.parents,
                earlier_full=np.array([change.get("earlier_full", True)]),
            )
        )
    outputs = model.forward_rows(levels)
    expected = general.compute_rows(levels, fast_paths=False)  # the plain tree-masked forward
    for out, want in zip(outputs, expected):
        assert max_difference(out.data, want.data) < TOLERANCE
