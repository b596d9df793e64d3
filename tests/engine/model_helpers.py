"""Hand-built inputs for driving TinyModel's batched forward directly (model-level tests)."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import TinyModel
from engine.rows import RowBatchItem, Rows


def chain_item(
    model: TinyModel,
    tokens: tuple[int, ...],
    stored: int,
    *,
    context_key: object = None,
    full: Rows | None = None,
) -> tuple[RowBatchItem, Rows]:
    """Positions [stored, len(tokens)) as one chain against the full rows of [0, stored), and
    the full rows of `tokens` (what the new rows must equal; `full` if already computed)."""
    if full is None:
        full = model.full_forward(tuple(tokens))
    local_start = max(0, stored - model.window + 1)
    n = len(tokens)
    item = RowBatchItem(
        context=full.take(slice(0, stored)),
        local=full.take(slice(local_start, stored)),
        local_positions=np.arange(local_start, stored),
        tokens=np.array(tokens[stored:], dtype=np.int64),
        positions=np.arange(stored, n),
        parents=np.arange(n - stored) - 1,
        context_key=context_key,
    )
    return item, full


def replay_item(
    model: TinyModel, tokens: tuple[int, ...], full: Rows, encoder: int, consumer: int
) -> RowBatchItem:
    """A warm restore of `tokens`: the encoder side of [0, encoder) is stored (from `full`),
    the consumers are replayed from position `consumer` on."""
    local_start = max(0, consumer - model.window + 1)
    return RowBatchItem(
        context=full.take(slice(0, encoder)),
        local=full.take(slice(local_start, consumer)),
        local_positions=np.arange(local_start, consumer),
        tokens=np.array(tokens[consumer:]),
        positions=np.arange(consumer, len(tokens)),
        parents=np.arange(len(tokens) - consumer) - 1,
        replay=encoder - consumer,
    )


def bounded_prefill(
    model: TinyModel, tokens: tuple[int, ...] | list[int], lower: int, mode: str, **fields: Any
) -> RowBatchItem:
    """A whole prompt's prefill under bounded recovery `mode` ("mask" or "compact") from
    position `lower` on."""
    return RowBatchItem(
        context=Rows.empty(model.layout),
        local=Rows.empty(model.layout),
        local_positions=np.zeros(0, dtype=np.int64),
        tokens=np.array(tokens),
        positions=np.arange(len(tokens)),
        parents=np.arange(len(tokens)) - 1,
        local_lower=lower,
        consumer_from=lower if mode == "compact" else 0,
        **fields,
    )


def max_difference(left: np.ndarray, right: np.ndarray) -> float:
    assert left.shape == right.shape, (left.shape, right.shape)
    return float(np.max(np.abs(left - right))) if left.size else 0.0
