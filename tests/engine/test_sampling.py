"""SamplingParams, the distribution after temperature / top-k / top-p, the seeded noise and the
sampling oracle (pure functions; the engine's use of them is in test_sampling_engine.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from engine import SamplingParams, TinyModel, greedy_generate, sample_generate
from engine.sampling import TARGET_STREAM, distribution, noise, race
from tests.engine.stats import ALPHA, assert_fits, chi2_sf, tally


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=math.inf), "temperature"),
        (dict(temperature=math.nan), "temperature"),
        (dict(temperature="hot"), "temperature"),
        (dict(temperature=True), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=-0.2), "top_p"),
        (dict(top_p=math.nan), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(seed=1.5), "seed"),
        (dict(seed=-3), "seed"),
        (dict(seed="7"), "seed"),
        (dict(seed=2**64), "seed"),
    ],
)
def test_bad_sampling_params_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_sampling_params_round_trip_and_keep_plain_python_numbers() -> None:
    params = SamplingParams(temperature=np.float32(0.5), top_k=np.int64(3), top_p=0.9, seed=11)
    data = params.to_dict()
    assert data == {"temperature": 0.5, "top_k": 3, "top_p": pytest.approx(0.9), "seed": 11}
    assert type(data["top_k"]) is int and type(data["temperature"]) is float
    assert SamplingParams.from_dict(data) == params
    with pytest.raises(ValueError, match="unknown sampling field"):
        SamplingParams.from_dict({"temperature": 1.0, "topk": 3})
    assert SamplingParams().describe() == "greedy"
    assert params.describe() == "T0.5 k3 p0.9 s11"
    assert SamplingParams(temperature=1.0).seeded().seed is not None
    assert SamplingParams().seeded().seed is None  # greedy needs no seed


def test_distribution_applies_temperature_top_k_and_top_p() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0, 3.0])
    hot = distribution(logits, SamplingParams(temperature=2.0))
    expected = np.exp(logits / 2.0) / np.exp(logits / 2.0).sum()
    assert np.allclose(hot, expected, atol=1e-15)
    top2 = distribution(logits, SamplingParams(temperature=1.0, top_k=2))
    assert set(np.flatnonzero(top2)) == {0, 4}
    assert top2[4] / top2[0] == pytest.approx(math.e)
    # Softmax at T = 1: [0.237, 0.087, 0.032, 0.012, 0.644]; 0.644 alone is short of 0.7.
    nucleus = distribution(logits, SamplingParams(temperature=1.0, top_p=0.7))
    assert set(np.flatnonzero(nucleus)) == {0, 4}
    assert set(np.flatnonzero(distribution(logits, SamplingParams(1.0, top_p=0.5)))) == {4}
    greedy = distribution(logits, SamplingParams())
    assert greedy.tolist() == [0, 0, 0, 0, 1]
    for probs in (hot, top2, nucleus):
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)


def test_noise_depends_only_on_seed_position_and_stream() -> None:
    first = noise(5, 10, TARGET_STREAM, 8)
    assert first.shape == (9,) and ((first >= 0) & (first < 1)).all()
    assert np.array_equal(first, noise(5, 10, TARGET_STREAM, 8))
    others = [noise(6, 10, 0, 8), noise(5, 11, 0, 8), noise(5, 10, 1, 8)]
    assert all(not np.array_equal(first, other) for other in others)


def test_the_exponential_race_samples_its_distribution() -> None:
    probs = np.array([0.5, 0.25, 0.125, 0.0, 0.125])
    uniforms = np.random.default_rng(0).random((20_000, len(probs)))
    winners = race(np.broadcast_to(probs, uniforms.shape), uniforms)
    assert_fits(tally(winners.tolist()), dict(enumerate(probs.tolist())), "race")


def test_chi_square_survival_function_matches_the_tables() -> None:
    # Critical values from the standard tables: P(X >= c) = level.
    for statistic, dof, level in [
        (3.841, 1, 0.05),
        (10.828, 1, 0.001),
        (18.307, 10, 0.05),
        (29.588, 10, 0.001),
        (82.529, 63, 0.05),
        (124.342, 100, 0.05),
    ]:
        assert chi2_sf(statistic, dof) == pytest.approx(level, rel=2e-3)
    assert ALPHA == 0.001


def test_sample_generate_at_temperature_zero_is_greedy_generate() -> None:
    model = TinyModel(seed=3)
    for prompt, eos in (([1, 2, 3], None), ([5], 7), ([9, 8, 7, 6], 2)):
        greedy = greedy_generate(model, prompt, max_tokens=9, eos_id=eos)
        sampled = sample_generate(model, prompt, max_tokens=9, eos_id=eos)
        assert sampled.tokens == greedy.tokens
        assert sampled.state.max_error(greedy.state) == 0.0
        # Top-k and top-p change nothing without temperature.
        narrow = SamplingParams(top_k=2, top_p=0.3)
        assert sample_generate(model, prompt, 9, eos, narrow).tokens == greedy.tokens


def test_sample_generate_is_reproducible_and_needs_a_seed() -> None:
    model = TinyModel(seed=4)
    params = SamplingParams(temperature=1.0, seed=21)
    once = sample_generate(model, [1, 2], 12, sampling=params)
    assert once.tokens == sample_generate(model, [1, 2], 12, sampling=params).tokens
    seeds = {sample_generate(model, [1, 2], 12, sampling=SamplingParams(1.0, seed=s)).tokens
             for s in range(6)}  # fmt: skip
    assert len(seeds) > 1
    with pytest.raises(ValueError, match="seed"):
        sample_generate(model, [1, 2], 3, sampling=SamplingParams(temperature=1.0))
    with pytest.raises(ValueError, match="sampling"):
        sample_generate(model, [1, 2], 3, sampling="hot")  # type: ignore[arg-type]


def test_sample_generate_follows_the_enumerated_distribution() -> None:
    """The first token and the first two over 20,000 seeds against p(a) and p(a) p(b | a)
    enumerated from the model's logits (chi-square at ALPHA)."""
    model = TinyModel(vocab_size=8, seed=5)
    params = dict(temperature=0.9, top_k=6, top_p=0.95)
    prompt = (1, 2, 3)
    first = distribution(model.full_forward(prompt).logits[-1], SamplingParams(**params))
    second = {
        a: distribution(model.full_forward((*prompt, a)).logits[-1], SamplingParams(**params))
        for a in range(8)
    }
    pairs = {(a, b): first[a] * second[a][b] for a in range(8) for b in range(8)}
    draws = []
    for seed in range(20_000):
        # The oracle's only randomness: the race over the noise of positions 3 and 4.
        a = race(first, noise(seed, 3, TARGET_STREAM, 8))
        b = race(second[a], noise(seed, 4, TARGET_STREAM, 8))
        if seed < 40:  # the oracle itself draws exactly these
            sampling = SamplingParams(**params, seed=seed)
            assert sample_generate(model, prompt, 2, sampling=sampling).tokens == (a, b)
        draws.append((a, b))
    assert_fits(tally([a for a, _ in draws]), dict(enumerate(first.tolist())), "first token")
    assert_fits(tally(draws), pairs, "first two tokens")
