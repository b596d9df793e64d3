"""Acceptance: the target's choice at every verified node, and the walk that follows it.

The walk is one rule for every mode: from the root, take the verified child equal to the
target's choice at the current node; the first node with no such child ends the path with
its choice (a replacement when it had verified children, else a bonus). The modes differ in
how the choice is made:
- greedy: the argmax;
- coupled: a sample of the target's distribution p with the request's stream at that
  position, whatever the draft proposed (so the tokens equal `sample_generate`'s);
- rejection (a chain): the child x is kept with probability min(1, p(x)/q(x)) (q: the
  draft's distribution x was drawn from); otherwise the choice is a sample of the residual
  normalise(max(p - q, 0)), which never equals x. A leaf's choice is a sample of p (the bonus).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sampling import race
from .tree import ROOT, DraftTree

ACCEPTANCE_MODES = ("coupled", "rejection")
TOP_SHOWN = 4  # tokens of a replacement's distribution the tree view keeps


def check_acceptance(mode: object, branching: int) -> None:
    """EngineConfig's `draft_acceptance`: a known mode; rejection sampling checks chains."""
    if mode not in ACCEPTANCE_MODES:
        raise ValueError(
            f"unknown draft_acceptance {mode!r}; use one of {', '.join(ACCEPTANCE_MODES)}"
        )
    if mode == "rejection" and branching > 1:
        raise ValueError(
            "draft_acceptance 'rejection' checks a chain: draft_branching must be 1, "
            f"got {branching}"
        )


@dataclass(frozen=True)
class Acceptance:
    path: list[int]  # accepted tree nodes after the root, in order
    next_token: int | None  # replacement or bonus; None when EOS ended the path
    kind: str  # "bonus" | "replacement" | "eos"


def accept(
    tree: DraftTree, verified: list[int], choice: dict[int, int], eos_id: int | None
) -> Acceptance:
    """Walk from the root taking the verified child equal to the target's choice."""
    node = ROOT
    path: list[int] = []
    children_of: dict[int, list[int]] = {}
    for child in verified:
        children_of.setdefault(tree.parents[child], []).append(child)
    while True:
        wanted = choice[node]
        children = children_of.get(node, [])
        for match in children:
            if tree.tokens[match] == wanted:
                break
        else:
            kind = "replacement" if children else "bonus"
            return Acceptance(path, wanted, kind)
        path.append(match)
        node = match
        if eos_id is not None and tree.tokens[match] == eos_id:
            return Acceptance(path, None, "eos")


# -- the rejection sampler's math (pure; batched over leading axes) --------------------------


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """normalise(max(p - q, 0)) over the last axis; where p <= q everywhere (p = q), p itself
    (that row never rejects: every x it could see has p(x) >= q(x))."""
    excess = np.maximum(p - q, 0.0)
    total = excess.sum(axis=-1, keepdims=True)
    return np.where(total > 0, excess / np.where(total > 0, total, 1.0), p)


def acceptance_probability(p_x: np.ndarray | float, q_x: np.ndarray | float) -> np.ndarray:
    """min(1, p(x) / q(x)); a proposal its own distribution gave no mass (q(x) = 0) is refused."""
    p_x, q_x = np.asarray(p_x, dtype=np.float64), np.asarray(q_x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q_x > 0, p_x / np.where(q_x > 0, q_x, 1.0), 0.0)
    return np.minimum(1.0, ratio)


def rejection_choice(
    p: np.ndarray, q: np.ndarray, x: np.ndarray, u: np.ndarray, uniforms: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The target's choice where the draft proposed x ~ q: x if u < min(1, p(x)/q(x)), else a
    residual sample (the race over `uniforms`). Returns (choices, accepted), batched."""
    x = np.asarray(x)
    p_x = np.take_along_axis(p, x[..., None], axis=-1)[..., 0]
    q_x = np.take_along_axis(q, x[..., None], axis=-1)[..., 0]
    accepted = np.asarray(u) < acceptance_probability(p_x, q_x)
    replacement = race(residual(p, q), uniforms)
    return np.where(accepted, x, replacement), accepted


def point_mass(token: int, vocab_size: int) -> np.ndarray:
    q = np.zeros(vocab_size)
    q[token] = 1.0
    return q


def top_tokens(probs: np.ndarray, count: int = TOP_SHOWN) -> list[list[float]]:
    """The `count` most likely [token, probability] pairs (for the tree view)."""
    order = np.argsort(-probs, kind="stable")[:count]
    return [[int(t), _rounded(probs[t])] for t in order if probs[t] > 0]


# -- one request's choices --------------------------------------------------------------------


def sampled_choices(
    tree: DraftTree,
    verified: list[int],
    nodes: list[int],
    probs: np.ndarray,
    uniforms: np.ndarray,
    samples: list[int],
    draft_probs: dict[int, np.ndarray] | None,
) -> tuple[dict[int, int], dict[int, dict[str, Any]]]:
    """The target's choice at the root and every verified node (`nodes`, with the target's
    distribution p, its stream's uniforms and their race's sample of p at each, row by row)
    of a sampled request, and
    what the tree view shows of each verified node's check (p, q, draw, acceptance probability
    and, where the target chose another token, the top of the distribution it chose from).
    `draft_probs` is given under rejection: each verified node's q (none: a point mass)."""
    children: dict[int, list[int]] = {}
    for node in verified:
        children.setdefault(tree.parents[node], []).append(node)
    choice: dict[int, int] = {}
    checks: dict[int, dict[str, Any]] = {}
    for row, node in enumerate(nodes):
        p, kids, source = probs[row], children.get(node, []), probs[row]
        choice[node] = samples[row]  # coupled, and a chain's leaf: a sample of p
        if draft_probs is not None and kids:  # the chain's one child under rejection
            (child,) = kids
            token = tree.tokens[child]
            q = draft_probs.get(child)
            q = point_mass(token, len(p)) if q is None else q
            draw = uniforms[row, -1]
            chosen, _ = rejection_choice(p, q, np.array(token), draw, uniforms[row])
            choice[node], source = int(chosen), residual(p, q)
            checks[child] = {
                "q": _rounded(q[token]),
                "draw": _rounded(draw),
                "accept_prob": _rounded(acceptance_probability(p[token], q[token])),
            }
        for child in kids:
            token = tree.tokens[child]
            # Coupled: the child is kept when the sample equals it, with probability p(x).
            check = checks.setdefault(
                child, {"q": None, "draw": None, "accept_prob": _rounded(p[token])}
            )
            check["p"] = _rounded(p[token])
            if choice[node] != token:
                check["replacement_top"] = top_tokens(source)
    return choice, checks


def _rounded(value: object) -> float:
    return round(float(value), 6)  # type: ignore[arg-type]
