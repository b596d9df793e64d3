"""The attention floor: the least time one greedy decode step can take at a context length.

A greedy decode step of our model attends over the whole history `1 + depth` times (the encoder,
then each consumer layer's cross-attention over the shared keys and values), each time reading
`context` float64 keys and values of the model's width. `attention_floor` times only that
arithmetic, in NumPy, on contiguous arrays: q·Kᵀ, a softmax, p·V; no embedding, no projections,
no feed-forward, no scheduling, no pool. Nothing a float64 NumPy engine of this model does in a
decode step can take less. The reference's decode time per token divided by the floor is the
largest ratio such an engine could reach; the report prints it next to the long greedy targets.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

FLOOR_SECONDS = 0.2  # per context length: the best of as many runs as fit
FLOOR_MIN_RUNS = 20


def attention_floor(lengths: Iterable[int], width: int, depth: int) -> dict[str, float]:
    """Best-of-many milliseconds of one decode step's global attentions, by context length."""
    return {str(length): _best_ms(length, width, depth) for length in lengths}


def _best_ms(length: int, width: int, depth: int) -> float:
    rng = np.random.default_rng(length)
    encoder = (rng.standard_normal((length, width)), rng.standard_normal((length, width)))
    shared = (rng.standard_normal((length, width)), rng.standard_normal((length, width)))
    planes = [encoder] + [shared] * depth  # every consumer layer reads the same shared planes
    queries = rng.standard_normal((len(planes), width)) / np.sqrt(width)
    best = float("inf")
    runs = 0
    started = time.perf_counter()
    while runs < FLOOR_MIN_RUNS or time.perf_counter() - started < FLOOR_SECONDS:
        begin = time.perf_counter()
        for query, (keys, values) in zip(queries, planes):
            scores = keys @ query
            scores -= scores.max()
            np.exp(scores, out=scores)
            (scores @ values) / scores.sum()
        best = min(best, time.perf_counter() - begin)
        runs += 1
    return best * 1e3
