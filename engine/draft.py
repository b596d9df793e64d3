"""Draft trees, the verification budget, and greedy tree acceptance.

A round's tree hangs off the request's pending token (node 0, the *root*, already committed).
The draft grows it level by level, expanding the most probable nodes; the budget picks which
nodes the target verifies; acceptance walks from the root along the target's argmax.
A chain is the special case `branching == 1`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from .model import is_integer, is_number

ROOT = 0


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]
    depths: list[int]
    probs: list[float]  # draft probability of the token given its parent
    path_probs: list[float]  # product of probs from the root
    selected: list[bool] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # root/accepted/rejected/unverified
    target_tokens: list[int | None] = field(default_factory=list)

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

    def judge(self, verified: list[int], path: list[int], argmax: dict[int, int]) -> None:
        """Record each node's verdict and, where the target disagreed, the target's token."""
        chosen, accepted = set(verified), set(path)
        self.selected = [i == ROOT or i in chosen for i in range(len(self))]
        self.verdicts, self.target_tokens = [], []
        for i in range(len(self)):
            if i == ROOT:
                verdict, token = "root", None
            elif i not in chosen:
                verdict, token = "unverified", None
            elif i in accepted:
                verdict, token = "accepted", self.tokens[i]
            else:
                verdict, token = "rejected", argmax.get(self.parents[i])
            self.verdicts.append(verdict)
            self.target_tokens.append(token)

    def to_dict(self) -> dict:
        return {
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
                }
                for i in range(len(self))
            ]
        }


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


def best_nodes(tree: DraftTree, nodes: list[int], count: int) -> list[int]:
    ranked = sorted(nodes, key=lambda i: (-tree.path_probs[i], i))
    return sorted(ranked[:count])


@dataclass(frozen=True)
class Budget:
    total: int  # verified positions this round, main positions included
    per_request: tuple[int, ...]
    graph_size: int | None
    expected_tokens: float
    estimated_cost: float | None


def choose_budget(
    current: list[list[float]],
    previous: list[list[float]],
    *,
    max_batch_tokens: int,
    cost_curve: tuple[tuple[int, float], ...] | None,
) -> Budget:
    """Pick the total with last round's confidences, then split it with this round's.

    `current[r]` holds request r's candidate path probabilities (non-root nodes). Each request
    always verifies its main position; extra positions go to the most probable nodes overall.
    """
    requests = len(current)
    available = sum(len(c) for c in current)
    cap = min(max_batch_tokens, requests + available)
    stale = []
    for now, before in zip(current, previous):
        ordered = sorted(now, reverse=True)
        old = sorted(before, reverse=True)[: len(ordered)]
        stale.extend(old + ordered[len(old) :])
    stale.sort(reverse=True)
    if not cost_curve:
        total, graph, cost = cap, None, None
        expected = requests + sum(stale[: total - requests])
    else:
        sizes = [size for size, _ in cost_curve]
        best = None
        expected = float(requests)
        for extra in range(cap - requests + 1):
            if extra:
                expected += stale[extra - 1]
            index = bisect_left(sizes, requests + extra)
            if index == len(sizes):
                break
            graph, cost = cost_curve[index]
            if best is None or expected / cost > best[1] / best[3] + 1e-12:
                best = (requests + extra, expected, graph, cost)
        assert best is not None
        total, expected, graph, cost = best
    return Budget(total, split_budget(current, total), graph, float(expected), cost)


def split_budget(current: list[list[float]], total: int) -> tuple[int, ...]:
    """Main position for everyone, then extra positions by path probability."""
    ranked = sorted(
        (-p, rank, r)
        for r, probs in enumerate(current)
        for rank, p in enumerate(sorted(probs, reverse=True))
    )
    lengths = [1] * len(current)
    for _, _, r in ranked[: total - len(current)]:
        lengths[r] += 1
    return tuple(lengths)


def select_nodes(tree: DraftTree, count: int) -> list[int]:
    """The `count` most probable non-root nodes; prefix-closed because a child's path
    probability never exceeds its parent's and ties go to the shallower node."""
    if count <= 0:
        return []
    order = sorted(range(1, len(tree)), key=lambda i: (-tree.path_probs[i], tree.depths[i], i))
    chosen = set(order[:count])
    for node in list(chosen):  # guard against float ties breaking closure
        parent = tree.parents[node]
        while parent > 0 and parent not in chosen:
            chosen.add(parent)
            parent = tree.parents[parent]
    return sorted(chosen, key=lambda i: (tree.depths[i], i))


@dataclass(frozen=True)
class Acceptance:
    path: list[int]  # accepted tree nodes after the root, in order
    next_token: int | None  # replacement or bonus; None when EOS ended the path
    kind: str  # "bonus" | "replacement" | "eos"


def accept(
    tree: DraftTree, verified: list[int], argmax: dict[int, int], eos_id: int | None
) -> Acceptance:
    """Walk from the root taking the verified child equal to the target's argmax."""
    node = ROOT
    path: list[int] = []
    children_of: dict[int, list[int]] = {}
    for child in verified:
        children_of.setdefault(tree.parents[child], []).append(child)
    while True:
        wanted = argmax[node]
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


def validate_cost_curve(curve: object, max_batch_tokens: int) -> tuple[tuple[int, float], ...]:
    try:
        points = tuple(tuple(p) for p in curve)  # type: ignore[attr-defined]
    except TypeError:
        raise ValueError(
            f"cost_curve must be a sequence of (size, cost) pairs, got {curve!r}"
        ) from None
    last = 0
    for point in points:
        if len(point) != 2:
            raise ValueError(f"cost_curve points must be (size, cost) pairs, got {point!r}")
        size, cost = point
        if not is_integer(size) or size <= last:
            raise ValueError("cost_curve sizes must be positive, strictly increasing integers")
        if not is_number(cost) or not math.isfinite(cost):
            raise ValueError(f"cost_curve cost {cost!r} must be a finite number")
        if cost <= 0:
            raise ValueError(f"cost_curve cost {cost!r} must be positive")
        last = int(size)
    fitting = tuple((int(s), float(c)) for s, c in points if s <= max_batch_tokens)
    if points and not fitting:
        raise ValueError("no cost_curve size fits within max_batch_tokens")
    return fitting
