"""Draft trees: how a round's speculation is grown, node by node.

A round's tree hangs off the request's pending token (node 0, the *root*, already committed).
The drafter grows it level by level, expanding the most probable nodes. A chain is the special
case `branching == 1`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sampling import DRAFT_STREAM, TARGET_STREAM, SamplingParams, distributions, noise_rows, race

ROOT = 0


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    probs: list[float]  # draft probability of the token given its parent
    path_probs: list[float]  # product of probs from the root
    selected: list[bool] = field(default_factory=list)
    # root / accepted / rejected / discarded (below a rejected node) / unverified
    verdicts: list[str] = field(default_factory=list)
    target_tokens: list[int | None] = field(default_factory=list)
    # A sampled request's verified nodes: p(x), q(x), the draw, the acceptance probability,
    # and at a rejection the top of the distribution the replacement came from.
    checks: dict[int, dict[str, Any]] = field(default_factory=dict)
    ngram: dict[str, int] | None = None  # the n-gram drafter's match: context start, length

    @classmethod
    def rooted(cls, token: int) -> DraftTree:
        return cls([token], [-1], [0], [1.0], [1.0])

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, prob: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.probs.append(prob)
        self.path_probs.append(self.path_probs[parent] * prob)
        return len(self.tokens) - 1

    def judge(
        self,
        verified: list[int],
        path: list[int],
        choice: dict[int, int],
        checks: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        """Record each node's verdict and, where the target disagreed, the target's token. A
        verified node below a rejected one is discarded with its parent (never judged)."""
        chosen, accepted = set(verified), set(path)
        self.selected = [i == ROOT or i in chosen for i in range(len(self))]
        self.verdicts, self.target_tokens = [], []
        for i in range(len(self)):
            parent = self.parents[i]
            if i == ROOT:
                verdict, token = "root", None
            elif i not in chosen:
                verdict, token = "unverified", None
            elif i in accepted:
                verdict, token = "accepted", self.tokens[i]
            elif parent == ROOT or parent in accepted:
                verdict, token = "rejected", choice.get(parent)
            else:
                verdict, token = "discarded", None
            self.verdicts.append(verdict)
            self.target_tokens.append(token)
        end = path[-1] if path else ROOT  # where the replacement (or bonus) was chosen
        self.checks = {}
        for node, check in (checks or {}).items():
            kept = dict(check)
            if self.verdicts[node] != "rejected" or self.parents[node] != end:
                kept.pop("replacement_top", None)  # no replacement was chosen in its place
            self.checks[node] = kept

    def to_dict(self) -> dict:
        view: dict[str, Any] = {
            "nodes": [
                {
                    "id": i,
                    "parent": self.parents[i],
                    "depth": self.depths[i],
                    "token": self.tokens[i],
                    "prob": self.probs[i],
                    "path_prob": self.path_probs[i],
                    "selected": self.selected[i] if self.selected else i == ROOT,
                    "verdict": self.verdicts[i] if self.verdicts else None,
                    "target_token": self.target_tokens[i] if self.target_tokens else None,
                    **self.checks.get(i, {}),  # a sampled request's verified nodes
                }
                for i in range(len(self))
            ]
        }
        if self.ngram is not None:
            view["ngram"] = dict(self.ngram)
        return view


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def top_children(logits: np.ndarray, branching: int) -> tuple[list[list[float]], list[list[int]]]:
    """The `branching` most likely tokens of every row, and their softmax probabilities, for
    all rows at once (as lists: the trees are grown in Python)."""
    if branching == 1:  # a chain: the best token's probability is 1 / sum(exp(l - max l))
        top = logits.argmax(axis=-1)
        best = logits[np.arange(len(logits)), top]
        total = np.exp(logits - best[:, None]).sum(axis=-1)
        return (1.0 / total)[:, None].tolist(), top[:, None].tolist()
    probabilities = softmax(logits)
    top = np.argsort(-probabilities, axis=-1, kind="stable")[:, :branching]
    return np.take_along_axis(probabilities, top, axis=1).tolist(), top.tolist()


def expand(
    tree: DraftTree,
    frontier: list[int],
    probabilities: list[list[float]],
    top: list[list[int]],
    cap: int,
) -> list[int]:
    """Give each frontier node its top children (`top[row]`, with `probabilities[row]`), best
    path probability first, while the tree has fewer than `cap` non-root nodes. Returns the
    new nodes."""
    room = cap - (len(tree) - 1)
    if len(frontier) == 1 and len(top[0]) == 1:  # a chain's one child: nothing to rank
        return [tree.add(frontier[0], top[0][0], probabilities[0][0])] if room > 0 else []
    candidates = []
    for row, node in enumerate(frontier):
        base = tree.path_probs[node]
        for token, p in zip(top[row], probabilities[row]):
            candidates.append((-base * p, node, token, p))
    candidates.sort()
    added = []
    for _, node, token, p in candidates[: max(0, room)]:
        added.append(tree.add(node, token, p))
    return added


@dataclass(frozen=True)
class Children:
    """A sampled request's children of one node: their tokens, the probabilities the tree
    ranks them by, and (rejection) the distribution q the one child was drawn from."""

    tokens: list[int]
    probs: list[float]
    q: np.ndarray | None = None


def sampled_children(
    logits: np.ndarray,
    params: list[SamplingParams],
    positions: list[int],
    branching: int,
    rejection: bool,
) -> list[Children]:
    """The children a draft proposes for sampled requests, one row of draft logits per
    expanded node (its request's parameters, the absolute position of the child), in one pass.

    Rejection: one child drawn from the draft's q with the request's draft stream; it ranks by
    max(q), not q(x), because which positions are verified must not depend on the draw.
    Coupled: the draft's sample with the *target's* stream first (when q is close to p it is
    the target's own choice), then the next most likely tokens; the target decides alone.
    """
    q = distributions(logits, params)
    seeds = [p.seed for p in params]
    stream = DRAFT_STREAM if rejection else TARGET_STREAM
    first = race(q, noise_rows(seeds, positions, stream, q.shape[1])).tolist()
    if rejection:
        best = q.max(axis=-1).tolist()
        return [Children([t], [b], row) for t, b, row in zip(first, best, q)]
    if branching == 1:  # a chain: the sample alone
        return [Children([t], [float(row[t])]) for t, row in zip(first, q)]
    order = np.argsort(-q, axis=-1, kind="stable")[:, :branching].tolist()
    children = []
    for token, ranked, row in zip(first, order, q):
        tokens = [token, *[t for t in ranked if t != token and row[t] > 0][: branching - 1]]
        children.append(Children(tokens, [float(row[t]) for t in tokens]))
    return children


def best_nodes(tree: DraftTree, nodes: list[int], count: int) -> list[int]:
    ranked = sorted(nodes, key=lambda i: (-tree.path_probs[i], i))
    return sorted(ranked[:count])
