"""The verification budget: how many positions each request verifies, and which nodes."""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from ..model import is_integer, is_number
from .tree import DraftTree


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
