"""Sampled requests in the engine: under `coupled` acceptance every request's tokens equal
`sample_generate`'s with its seed and its committed state the oracle's within 1e-10, for a
grid of sampling parameters x drafts (none, early-exit chain, tree, n-gram) x pools and
windows, and for random interleavings of every operation; seeds are drawn and recorded at
submit; the same seed gives the same tokens across runs, undo and redo, and preemption."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from engine import (
    Engine,
    EngineConfig,
    NgramDrafter,
    SamplingParams,
    TinyModel,
    make_draft,
    sample_generate,
)
from tests.engine.helpers import (
    ManualClock,
    TrippingClock,
    check_all_finished,
    check_block_invariants,
    drain,
    events_of,
    request_view,
)
from tests.engine.test_engine_properties import (
    COMMON,
    EVERYTHING,
    Setup,
    apply,
    finish_and_check,
    operation_lists,
    setups,
)

SAMPLINGS = [
    SamplingParams(temperature=0.8),
    SamplingParams(temperature=1.0, top_k=5),
    SamplingParams(temperature=0.6, top_p=0.8),
    SamplingParams(temperature=1.3, top_k=8, top_p=0.9, seed=1234),
    SamplingParams(),  # greedy beside sampled requests
]
# Repeats give the n-gram drafter something to find.
WORKLOAD = [([1, 2, 3, 1, 2], 7), ([1, 2, 3, 4, 5], 5), ([9, 8, 9, 8], 6), ([3], 8)]
LATE = [([1, 2, 3, 1, 2, 3], 5), ([9, 8], 3)]


def draft_for(kind: str, target: TinyModel) -> Any:
    return {
        "none": None,
        "chain": make_draft(target, seed=3),
        "tree": make_draft(target, seed=3),
        "copy": make_draft(target, depth=target.depth, noise=0.0),
        "ngram": NgramDrafter(),
        "ngram1": NgramDrafter(min_n=1, max_n=4),
    }[kind]


def run_sampled(
    seed: int, window: int, draft: str, config: dict[str, Any], sampling_offset: int = 0
) -> Engine:
    target = TinyModel(seed=seed, window=window)
    if draft == "tree":
        config = {"draft_branching": 2, "max_draft_nodes": 6, **config}
    engine = Engine(target, draft_for(draft, target), config=EngineConfig(**config),
                    clock=ManualClock())  # fmt: skip
    choices = itertools.cycle(SAMPLINGS[sampling_offset:] + SAMPLINGS[:sampling_offset])
    seeds = itertools.count(100 * seed)  # fixed seeds: a deterministic test (drawn ones below)

    def submit(prompt: list[int], max_tokens: int) -> None:
        params = next(choices)
        if not params.greedy and params.seed is None:
            params = SamplingParams(params.temperature, params.top_k, params.top_p, next(seeds))
        engine.submit(prompt, max_tokens=max_tokens, sampling=params)

    for prompt, max_tokens in WORKLOAD:
        submit(prompt, max_tokens)
    for _ in range(2):
        engine.step()
        check_block_invariants(engine)
    for prompt, max_tokens in LATE:
        submit(prompt, max_tokens)
    drain(engine)
    results = check_all_finished(engine)  # sample_generate with each view's seed
    assert len(results) == len(WORKLOAD) + len(LATE)
    return engine


GRID = [
    (0, 4, "none", dict()),
    (1, 2, "chain", dict(draft_width=3, block_size=2)),
    (2, 4, "tree", dict(draft_width=4, block_size=4, max_batch_tokens=8)),
    (3, 8, "ngram", dict(draft_width=4, block_size=1)),
    (4, 1, "ngram1", dict(draft_width=6, block_size=2, max_batch_tokens=5, max_active=2)),
    (5, 2, "copy", dict(draft_width=5, block_size=4, draft_branching=3, max_draft_nodes=4)),
    (6, 4, "chain", dict(draft_width=2, num_blocks=6, block_size=4, max_active=3)),  # preempts
    (7, 2, "tree", dict(num_blocks=8, block_size=2, max_batch_tokens=3, undo_depth=0)),
    (8, 4, "ngram1", dict(num_blocks=5, block_size=4, max_active=4, draft_width=3)),
]  # fmt: skip


@pytest.mark.parametrize(("seed", "window", "draft", "config"), GRID)
def test_sampled_requests_match_their_oracle(
    seed: int, window: int, draft: str, config: dict[str, Any]
) -> None:
    engine = run_sampled(seed, window, draft, config, sampling_offset=seed % len(SAMPLINGS))
    if draft != "none":
        assert engine.metrics()["drafts"]["proposed"] > 0


def test_rejection_acceptance_keeps_greedy_requests_exact() -> None:
    """Under `rejection` a greedy request is checked as ever (p and q are point masses)."""
    global_samplings = [SamplingParams()]
    target = TinyModel(seed=8)
    for draft in (make_draft(target, seed=3), NgramDrafter()):
        config = EngineConfig(draft_acceptance="rejection", draft_width=4, block_size=4)
        engine = Engine(target, draft, config=config, clock=ManualClock())
        for (prompt, max_tokens), sampling in zip(
            WORKLOAD + LATE, itertools.cycle(global_samplings)
        ):
            engine.submit(prompt, max_tokens=max_tokens, sampling=sampling)
        drain(engine)
        check_all_finished(engine)
        assert engine.metrics()["drafts"]["accepted"] > 0


def test_a_seed_is_drawn_at_submit_and_recorded() -> None:
    target = TinyModel(seed=2)
    engine = Engine(target, make_draft(target, seed=3), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=6, sampling=SamplingParams(temperature=0.9))
    greedy = engine.submit([1, 2, 3], max_tokens=6)
    settings_ = engine.settings(rid)
    seed = settings_["sampling"]["seed"]
    assert isinstance(seed, int)
    assert settings_["sampling"] == {"temperature": 0.9, "top_k": 0, "top_p": 1.0, "seed": seed}
    assert "sampling" not in engine.settings(greedy)  # a greedy request's settings stay short
    (queued, _) = events_of(engine.trace, "queued")
    assert queued["sampling"] == settings_["sampling"]
    assert request_view(engine.snapshot(), rid)["sampling"] == settings_["sampling"]
    assert request_view(engine.snapshot(), greedy)["sampling"]["temperature"] == 0.0
    first = engine.run()[0]
    # Submitting the recorded settings back (as a replay does) gives the same tokens.
    again = Engine(target, clock=ManualClock())
    replayed = again.generate(
        settings_["prompt"],
        max_tokens=settings_["max_tokens"],
        sampling=SamplingParams.from_dict(settings_["sampling"]),
    )
    assert replayed.tokens == first.tokens
    expected = sample_generate(target, [1, 2, 3], 6, sampling=SamplingParams(0.9, seed=seed))
    assert first.tokens == expected.tokens


@pytest.mark.parametrize(
    ("sampling", "field"),
    [
        (SamplingParams, None),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"seed": 0.5}, "seed"),
        ({"temp": 1.0}, "unknown sampling field"),
        ("hot", "sampling"),
    ],
)
def test_bad_sampling_at_submit_is_refused_and_changes_nothing(sampling: Any, field: str) -> None:
    engine = Engine(TinyModel(seed=1), clock=ManualClock())
    before = engine.snapshot()
    if field is None:  # the class instead of an instance
        field = "sampling"
    with pytest.raises(ValueError, match=field):
        engine.submit([1, 2], sampling=sampling)
    assert engine.snapshot() == before


def test_config_refuses_unknown_acceptance_and_a_rejection_tree() -> None:
    with pytest.raises(ValueError, match="draft_acceptance"):
        EngineConfig(draft_acceptance="greedy")
    with pytest.raises(ValueError, match="draft_branching"):
        EngineConfig(draft_acceptance="rejection", draft_branching=2)
    assert EngineConfig().draft_acceptance == "coupled"
    data = EngineConfig(draft_acceptance="rejection").to_dict()
    assert EngineConfig.from_dict(data).draft_acceptance == "rejection"


def sampled_tokens(engine: Engine, seeds: range, prompt: list[int]) -> list[tuple[int, ...]]:
    for seed in seeds:
        engine.submit(prompt, max_tokens=7, sampling=SamplingParams(1.1, top_k=6, seed=seed))
    return [r.tokens for r in engine.run()]


@pytest.mark.parametrize("acceptance", ["coupled", "rejection"])
def test_the_same_seed_gives_the_same_tokens_across_runs_undo_and_redo(acceptance: str) -> None:
    target = TinyModel(seed=6)

    def build() -> Engine:
        config = EngineConfig(draft_acceptance=acceptance, draft_width=3, undo_depth=64)
        return Engine(target, make_draft(target, seed=7), config=config, clock=ManualClock())

    runs = [sampled_tokens(build(), range(6), [4, 5, 6]) for _ in range(2)]
    assert runs[0] == runs[1]
    engine = build()
    for seed in range(6):
        engine.submit([4, 5, 6], max_tokens=7, sampling=SamplingParams(1.1, top_k=6, seed=seed))
    rounds = []
    while not engine.idle:
        rounds.append(engine.step())
        if len(rounds) % 2 == 0:  # undo and redo every other round
            engine.undo()
            assert engine.step() == rounds[-1]
    assert [r.tokens for r in engine.run()] == runs[0]


def test_sampled_tokens_survive_preemption() -> None:
    """A pool too small for every request preempts; each request keeps its own tokens."""
    target = TinyModel(seed=9)
    roomy = Engine(target, make_draft(target, seed=2), clock=ManualClock())
    expected = sampled_tokens(roomy, range(5), [1, 2, 3, 4])
    config = EngineConfig(num_blocks=6, block_size=2, max_active=4)
    tight = Engine(target, make_draft(target, seed=2), config=config, clock=ManualClock())
    assert sampled_tokens(tight, range(5), [1, 2, 3, 4]) == expected
    assert events_of(tight.trace, "preempt"), "the pool was meant to preempt"


def test_the_tree_view_records_each_check() -> None:
    target = TinyModel(seed=4, vocab_size=8)
    for acceptance in ("coupled", "rejection"):
        config = EngineConfig(draft_acceptance=acceptance, draft_width=4, undo_depth=0)
        engine = Engine(target, make_draft(target, seed=5, noise=0.5), config=config)
        for seed in range(8):
            engine.submit([1, 2], max_tokens=8, sampling=SamplingParams(1.0, seed=seed))
        verified = []
        for event in events_of(drain(engine), "verify"):
            verified.extend(n for n in event["nodes"] if n["verdict"] not in ("root", "unverified"))
        assert {n["verdict"] for n in verified} >= {"accepted", "rejected"}
        for node in verified:
            if node["verdict"] == "discarded":
                continue
            assert 0 < node["p"] <= 1 or node["verdict"] == "rejected"
            if acceptance == "rejection":
                assert 0 < node["q"] <= 1 and 0 <= node["draw"] < 1
                assert node["accept_prob"] == pytest.approx(
                    min(1, node["p"] / node["q"]), rel=1e-4, abs=1e-5
                )
                assert (node["draw"] < node["accept_prob"]) == (node["verdict"] == "accepted")
            else:
                assert node["q"] is None and node["accept_prob"] == node["p"]
            if node["verdict"] == "rejected":
                top = node["replacement_top"]  # [token, probability], most likely first
                probabilities = [p for _, p in top]
                assert top and probabilities == sorted(probabilities, reverse=True)
                assert all(p > 0 for p in probabilities) and sum(probabilities) <= 1 + 1e-6
                if acceptance == "rejection":  # the residual gives the rejected token nothing
                    assert node["token"] not in [t for t, _ in top]
                    assert node["target_token"] != node["token"]


def test_children_of_a_rejected_node_are_discarded_not_rejected() -> None:
    target = TinyModel(seed=5)
    config = EngineConfig(draft_width=4, draft_branching=2, max_draft_nodes=12)
    engine = Engine(target, TinyModel(seed=99, depth=1), config=config, clock=ManualClock())
    for prompt in ([1, 2, 3], [7, 5], [4, 4, 4, 4]):
        engine.submit(prompt, max_tokens=10)
    discarded = 0
    for event in events_of(drain(engine), "verify"):
        nodes = {n["id"]: n for n in event["nodes"]}
        for node in nodes.values():
            parent = nodes.get(node["parent"])
            if node["verdict"] in ("rejected", "accepted"):
                assert parent["verdict"] in ("root", "accepted")
            if node["verdict"] == "discarded":
                discarded += 1
                assert parent["verdict"] in ("rejected", "discarded")
                assert node["target_token"] is None
    assert discarded > 0
    check_all_finished(engine)


SAMPLED_SUBMITS = [SamplingParams(0.9), SamplingParams(1.2, top_k=4), SamplingParams(),
                   SamplingParams(0.7, top_p=0.85, seed=77)]  # fmt: skip


def sampling_submit(engine: Engine) -> None:
    """Make every submit of the shared interleaving sample, cycling through SAMPLED_SUBMITS
    (seeds from a counter where none is set: hypothesis needs a deterministic test)."""
    submit, choices, seeds = engine.submit, itertools.cycle(SAMPLED_SUBMITS), itertools.count()

    def sampled(*args: Any, **kwargs: Any) -> str:
        params = next(choices)
        if not params.greedy and params.seed is None:
            params = SamplingParams(params.temperature, params.top_k, params.top_p, next(seeds))
        return submit(*args, sampling=params, **kwargs)

    engine.submit = sampled  # type: ignore[method-assign]


@settings(max_examples=25, phases=[Phase.explicit, Phase.generate], **COMMON)
@given(
    setup=st.one_of(setups(pool="roomy"), setups(pool="pressure")),
    operations=operation_lists(EVERYTHING),
    ngram=st.booleans(),
)
def test_random_operations_with_sampled_requests_stay_exact(
    setup: Setup, operations: list, ngram: bool
) -> None:
    clock = TrippingClock()
    if ngram:  # the n-gram drafter in place of the setup's draft model
        target = TinyModel(seed=setup.seed, window=setup.window)
        engine = Engine(
            target, NgramDrafter(1, 3), config=EngineConfig(**setup.config), clock=clock
        )
    else:
        engine = setup.build(clock)
    sampling_submit(engine)
    apply(engine, clock, operations)
    finish_and_check(engine, clock, rewind=True)
