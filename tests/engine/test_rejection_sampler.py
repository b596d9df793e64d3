"""The rejection sampler keeps the target's distribution: the residual's adversarial cases as
pure functions, then chi-square fits (ALPHA, fixed seeds) of the first token and of the first
two against the distribution enumerated from the target's logits: vectorised over 40,000
chains through the acceptance math, and a smaller sample through the engine itself."""

from __future__ import annotations

import numpy as np
import pytest

from engine import Engine, EngineConfig, SamplingParams, TinyModel, make_draft
from engine.sampling import distribution, race
from engine.speculation.acceptance import acceptance_probability, rejection_choice, residual
from tests.engine.stats import assert_fits, tally

V = 8
PARAMS = SamplingParams(temperature=0.9, top_k=6, top_p=0.95)
PROMPT = (1, 2, 3)


def test_residual_when_p_equals_q_never_rejects() -> None:
    p = np.array([0.5, 0.3, 0.2, 0.0])
    assert acceptance_probability(p, p)[:3].tolist() == [1.0, 1.0, 1.0]
    assert np.array_equal(residual(p, p), p)  # unused, but a distribution
    rng = np.random.default_rng(1)
    x = np.array([0, 1, 2] * 100)
    p_rows = np.broadcast_to(p, (300, 4))
    chosen, accepted = rejection_choice(p_rows, p_rows, x, rng.random(300), rng.random((300, 5)))
    assert accepted.all() and np.array_equal(chosen, x)


def test_disjoint_supports_always_reject_into_p() -> None:
    p = np.array([0.6, 0.4, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.5, 0.5])
    assert np.array_equal(residual(p, q), p)
    assert acceptance_probability(p[2], q[2]) == 0.0
    rng = np.random.default_rng(2)
    n = 20_000
    x = rng.integers(2, 4, n)
    chosen, accepted = rejection_choice(
        np.broadcast_to(p, (n, 4)), np.broadcast_to(q, (n, 4)), x, rng.random(n), rng.random((n, 5))
    )
    assert not accepted.any()
    assert_fits(tally(chosen.tolist()), {0: 0.6, 1: 0.4}, "disjoint residual")


def test_a_one_hot_q_keeps_x_with_probability_p_of_x() -> None:
    p = np.array([0.1, 0.2, 0.3, 0.4])
    q = np.array([0.0, 0.0, 1.0, 0.0])  # a point mass: an n-gram proposal
    assert residual(p, q).tolist() == pytest.approx([1 / 7, 2 / 7, 0.0, 4 / 7])
    assert acceptance_probability(p[2], q[2]) == pytest.approx(0.3)
    rng = np.random.default_rng(3)
    n = 20_000
    chosen, accepted = rejection_choice(
        np.broadcast_to(p, (n, 4)), np.broadcast_to(q, (n, 4)), np.full(n, 2), rng.random(n),
        rng.random((n, 5)),
    )  # fmt: skip
    assert_fits(tally(accepted.astype(int).tolist()), {0: 0.7, 1: 0.3}, "kept")
    assert_fits(tally(chosen.tolist()), dict(enumerate(p.tolist())), "one-hot q")


def test_q_zero_where_p_is_positive_goes_to_the_residual() -> None:
    p = np.array([0.25, 0.25, 0.25, 0.25])
    q = np.array([0.0, 0.5, 0.5, 0.0])
    assert residual(p, q).tolist() == [0.5, 0.0, 0.0, 0.5]
    # A proposal its own q gave no mass is refused rather than divided by zero.
    assert acceptance_probability(p[0], q[0]) == 0.0
    rng = np.random.default_rng(4)
    n = 20_000
    p_rows, q_rows = np.broadcast_to(p, (n, 4)), np.broadcast_to(q, (n, 4))
    x = race(q_rows, rng.random((n, 4)))
    chosen, _ = rejection_choice(p_rows, q_rows, x, rng.random(n), rng.random((n, 5)))
    assert_fits(tally(chosen.tolist()), dict(enumerate(p.tolist())), "q = 0 where p > 0")


# -- the chain, vectorised -----------------------------------------------------------------


def tables(model: TinyModel) -> tuple[np.ndarray, np.ndarray]:
    """p after the prompt (V,) and after the prompt and a (V, V), by full recompute."""
    first = distribution(model.full_forward(PROMPT).logits[-1], PARAMS)
    second = np.array(
        [distribution(model.full_forward((*PROMPT, a)).logits[-1], PARAMS) for a in range(V)]
    )
    return first, second


def expected(p0: np.ndarray, p1: np.ndarray) -> tuple[dict[object, float], dict[object, float]]:
    single = {a: float(p0[a]) for a in range(V)}
    pairs = {(a, b): float(p0[a] * p1[a, b]) for a in range(V) for b in range(V)}
    return single, pairs


def simulate_chain(
    p: tuple[np.ndarray, np.ndarray], q: tuple[np.ndarray, np.ndarray], n: int, seed: int
) -> np.ndarray:
    """n two-token chains, the engine's way: noise indexed by position, so a second round
    after a rejection reuses the draws of position 1 (they decided nothing before)."""
    rng = np.random.default_rng(seed)
    draft = rng.random((n, 2, V))  # the draft's stream
    target = rng.random((n, 2, V + 1))  # the target's: race uniforms and the acceptance draw
    p0, p1 = np.broadcast_to(p[0], (n, V)), p[1]
    q0, q1 = np.broadcast_to(q[0], (n, V)), q[1]
    x1 = race(q0, draft[:, 0])
    t1, _ = rejection_choice(p0, q0, x1, target[:, 0, V], target[:, 0])
    # Accepted: t1 = x1 and the chain's second node is checked at t1; rejected: the next
    # round drafts after the residual's t1. Both draw position 1's noise at context t1.
    x2 = race(q1[t1], draft[:, 1])
    t2, _ = rejection_choice(p1[t1], q1[t1], x2, target[:, 1, V], target[:, 1])
    return np.stack([t1, t2], axis=1)


@pytest.mark.parametrize("draft", ["model", "point mass", "uniform"])
def test_the_rejection_chain_keeps_the_target_distribution(draft: str) -> None:
    target = TinyModel(vocab_size=V, seed=11)
    p = tables(target)
    if draft == "model":
        q = tables(make_draft(target, seed=12, noise=0.3))
    elif draft == "point mass":  # a deterministic proposal: the draft's argmax
        q0, q1 = tables(make_draft(target, seed=12))
        q = (np.eye(V)[q0.argmax()], np.eye(V)[q1.argmax(axis=1)])
    else:
        q = (np.full(V, 1 / V), np.full((V, V), 1 / V))
    draws = simulate_chain(p, q, 40_000, seed=7)
    single, pairs = expected(*p)
    assert_fits(tally(draws[:, 0].tolist()), single, f"{draft}: first token")
    assert_fits(tally(draws.tolist()), pairs, f"{draft}: first two tokens")


def test_the_chi_square_check_catches_a_biased_sampler() -> None:
    """The same fit refuses a classic bug: resampling p (not the residual) after a rejection
    favours the draft's likely tokens. So the fits above have power."""
    target = TinyModel(vocab_size=V, seed=11)
    p0 = tables(target)[0]
    q0 = tables(make_draft(target, seed=12, noise=0.3))[0]
    n = 40_000
    rng = np.random.default_rng(8)
    p_rows, q_rows = np.broadcast_to(p0, (n, V)), np.broadcast_to(q0, (n, V))
    x = race(q_rows, rng.random((n, V)))
    _, accepted = rejection_choice(p_rows, q_rows, x, rng.random(n), rng.random((n, V + 1)))
    wrong = np.where(accepted, x, race(p_rows, rng.random((n, V))))
    single, _ = expected(p0, np.eye(V))
    with pytest.raises(AssertionError, match="chi-square"):
        assert_fits(tally(wrong.tolist()), single, "biased")


# -- through the engine --------------------------------------------------------------------


def engine_draws(draft: object, config: EngineConfig, seeds: range) -> list[tuple[int, ...]]:
    target = TinyModel(vocab_size=V, seed=11)
    engine = Engine(target, draft, config=config)  # type: ignore[arg-type]
    for seed in seeds:
        sampling = SamplingParams(PARAMS.temperature, PARAMS.top_k, PARAMS.top_p, seed)
        engine.submit(list(PROMPT), max_tokens=3, sampling=sampling)
    results = engine.run()
    assert engine.metrics()["drafts"]["proposed"] > 0
    return [r.tokens for r in results]


ENGINE_CONFIG = dict(max_active=64, max_batch_tokens=256, undo_depth=0, draft_width=2)


@pytest.mark.parametrize(
    "config",
    [
        dict(draft_acceptance="rejection"),
        dict(draft_acceptance="coupled", draft_branching=2, max_draft_nodes=4),
    ],
    ids=["rejection chain", "coupled tree"],
)
def test_the_engine_keeps_the_target_distribution(config: dict) -> None:
    """1,500 seeded requests (the vectorised test above has the large samples): the first
    token is the prompt round's sample; the second and third went through the draft check.
    Fits of the first token, of the first two and of the second and third against enumerated
    marginals."""
    target = TinyModel(vocab_size=V, seed=11)
    model = make_draft(target, seed=12)
    tokens = engine_draws(model, EngineConfig(**ENGINE_CONFIG, **config), range(1_500))
    p0, p1 = tables(target)
    single, pairs = expected(p0, p1)
    later: dict[object, float] = {}
    for a in range(V):
        for b in range(V):
            if p0[a] * p1[a, b] == 0:
                continue
            row = target.full_forward((*PROMPT, a, b)).logits[-1]
            for c, pc in enumerate(distribution(row, PARAMS)):
                later[(b, c)] = later.get((b, c), 0.0) + p0[a] * p1[a, b] * pc
    assert_fits(tally([t[0] for t in tokens]), single, f"{config}: first token")
    assert_fits(tally([t[:2] for t in tokens]), pairs, f"{config}: first two tokens")
    assert_fits(tally([t[1:3] for t in tokens]), later, f"{config}: second and third")
