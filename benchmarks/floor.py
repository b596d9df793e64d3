"""The decode floor: what one greedy decode step of this model costs in NumPy, and nothing else.

A greedy decode step runs one row through the encoder and `depth` consumer layers and attends
over the whole history `1 + depth` times (the encoder, then each consumer layer's
cross-attention over the shared keys and values), each time reading `context` float64 keys and
values of the model's width. Timed apart, best of many runs, one BLAS thread:

* `attention_ms`: only those attentions (q·Kᵀ, a softmax, p·V over contiguous arrays). Every
  decode step of this model computes them; in NumPy none can compute them faster. A hard floor.
* `dense_ms`: the row's norms, fused projections, feed-forwards and head, as written here
  (about 40 small NumPy calls, mostly per-call cost: an engine could shave it, not remove it).

The report divides the reference's decode time per token by each, next to the long greedy
targets: the most any float64 NumPy engine of this model could reach against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from engine.model import feed_forward, rms_norm  # the model's own, so the floor follows it

FLOOR_SECONDS = 0.2  # per measurement: the best of as many runs as fit
FLOOR_MIN_RUNS = 20


def decode_floor(
    lengths: Iterable[int], width: int, depth: int, vocab: int
) -> dict[str, dict[str, float]]:
    """Best-of-many milliseconds of a decode step's arithmetic, by context length: its global
    attentions, its dense path, and their sum."""
    dense = _best_ms(_dense_path(width, depth, vocab))
    floors = {}
    for length in lengths:
        attention = _best_ms(_global_attentions(length, width, depth))
        floors[str(length)] = {
            "attention_ms": attention,
            "dense_ms": dense,
            "total_ms": attention + dense,
        }
    return floors


def _best_ms(step: Callable[[], object]) -> float:
    best = float("inf")
    runs = 0
    started = time.perf_counter()
    while runs < FLOOR_MIN_RUNS or time.perf_counter() - started < FLOOR_SECONDS:
        begin = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - begin)
        runs += 1
    return best * 1e3


def _global_attentions(length: int, width: int, depth: int) -> Callable[[], object]:
    rng = np.random.default_rng(length)
    encoder = (rng.standard_normal((length, width)), rng.standard_normal((length, width)))
    shared = (rng.standard_normal((length, width)), rng.standard_normal((length, width)))
    planes = [encoder] + [shared] * depth  # every consumer layer reads the same shared planes
    queries = rng.standard_normal((len(planes), width)) / np.sqrt(width)

    def step() -> None:
        for query, (keys, values) in zip(queries, planes):
            scores = keys @ query
            scores -= scores.max()
            np.exp(scores, out=scores)
            (scores @ values) / scores.sum()

    return step


def _dense_path(width: int, depth: int, vocab: int) -> Callable[[], object]:
    rng = np.random.default_rng(0)

    def matrix(rows: int, columns: int) -> np.ndarray:
        return rng.standard_normal((rows, columns)) / np.sqrt(rows)

    row = rng.standard_normal((1, width))
    encoder_qkv, encoder_out = matrix(width, 3 * width), matrix(width, width)
    encoder_ff = (matrix(width, width), matrix(width, width))
    shared_kv = matrix(width, 2 * width)
    layers = [
        (
            matrix(width, 4 * width),
            matrix(2 * width, width),
            matrix(width, width),
            matrix(width, width),
        )
        for _ in range(depth)
    ]
    head = matrix(width, vocab)
    attended = rng.standard_normal((1, width))  # stands in for each attention's output

    def step() -> int:
        x = row
        rms_norm(x) @ encoder_qkv
        x = x + attended @ encoder_out
        x = x + feed_forward(x, *encoder_ff)
        x @ shared_kv
        for layer_in, layer_out, ff_in, ff_out in layers:
            rms_norm(x) @ layer_in
            x = x + np.concatenate([attended, attended], axis=-1) @ layer_out
            x = x + feed_forward(x, ff_in, ff_out)
        return int(np.argmax(rms_norm(x) @ head))

    return step
