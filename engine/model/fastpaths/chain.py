"""The chain path: a batch where every item adds the same number of rows in one chain (a decode
step, a draft level, a chain verification), without the tree forward's masks and scatters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...rows import BatchContext, BatchRows, RowBatchItem, Rows
from ..layers import ENCODER_PLANE, SHARED_PLANE, feed_forward, mask_bias, rms_norm
from .buffers import WorkBuffers
from .chain_attention import ChainAttention, attend_window
from .chunks import PREFILL_CHUNK
from .padded import batch_context

if TYPE_CHECKING:
    from ..tinymodel import TinyModel


def chain_shape(batch: list[RowBatchItem]) -> tuple[int, int] | None:
    """(k, q) when every item adds q full rows in one chain after the k rows an earlier call
    computed (also a chain) and after all its stored rows (a draft may store only the most
    recent ones), under exact recovery rules; else None."""
    first = batch[0]
    k, q = len(first.earlier_positions), len(first.tokens)
    if q == 0 or q > PREFILL_CHUNK:  # a long prefill goes chunk by chunk instead
        return None
    for item in batch:
        if (
            len(item.tokens) != q
            or len(item.earlier_positions) != k
            or item.replay
            or item.local_lower
            or item.consumer_from
            or (k and (item.earlier is None or len(item.earlier) != k))
        ):
            return None
    if k == 0 and q == 1:  # a decode step: checked without building arrays
        plain = all(
            item.parents[0] == -1 and item.positions[0] >= len(item.context) for item in batch
        )
        return (0, 1) if plain else None
    if k == 1 and q == 1:  # a second draft level: checked without building arrays either
        plain = all(
            item.parents[0] == 0
            and item.earlier_parents[0] == -1
            and item.earlier_full[0]
            and item.positions[0] == item.earlier_positions[0] + 1
            and item.earlier_positions[0] >= len(item.context)
            for item in batch
        )
        return (1, 1) if plain else None
    return (k, q) if _arrays_chain(batch, k) else None


def _arrays_chain(batch: list[RowBatchItem], k: int) -> bool:
    """Earlier and new rows chain on, position after position, past every stored row."""
    q = len(batch[0].tokens)
    steps = np.arange(k + q)
    parents = np.array([item.parents for item in batch])
    positions = np.array([item.positions for item in batch])
    if k:
        earlier_parents = np.array([item.earlier_parents for item in batch])
        earlier_positions = np.array([item.earlier_positions for item in batch])
        if not (
            np.concatenate([item.earlier_full for item in batch]).all()
            and (earlier_parents == steps[:k] - 1).all()
        ):
            return False
        positions = np.concatenate([earlier_positions, positions], axis=1)
    stored = np.array([len(item.context) for item in batch])
    return bool(
        (parents == steps[k:] - 1).all()
        and (positions == positions[:, :1] + steps).all()
        and (positions[:, 0] >= stored).all()
    )


def chain_rows(
    model: TinyModel,
    work: WorkBuffers,
    batch: list[RowBatchItem],
    shape: tuple[int, int],
    context: BatchContext | None,
) -> BatchRows:
    """Every item adds `q` rows in a chain right after its stored rows and `k` rows computed
    earlier this round. Same maths as the tree forward (the oracle tests hold both to
    `full_forward`), far fewer NumPy calls."""
    k, q = shape
    w, fused, layout, width = model.weights, model.fused, model.layout, model.width
    size, rows = len(batch), len(batch) * q
    tokens = np.array([item.tokens for item in batch], dtype=np.int64).reshape(rows)
    positions = np.array([item.positions for item in batch], dtype=np.int64)
    earlier = np.array([item.earlier.data for item in batch]) if k else None  # type: ignore[union-attr]
    if context is None:
        context = batch_context(model, work, batch, tail=k + q, name="decode")
    # Dense parts run on (B·q, W) rows: one matrix product each, not one per item.
    flat = np.empty((rows, layout.size))
    chain = ChainAttention(context, flat.reshape(size, q, layout.size), earlier, k, width)
    local, local_bias = _chain_local(model, context, positions, earlier, chain.causal)

    def per_item(x: np.ndarray) -> np.ndarray:
        return x.reshape(size, q, x.shape[-1])

    wo, f_in, f_out = w.encoder[3:]
    x = model.embed(tokens, positions.reshape(rows))
    qkv = rms_norm(x) @ fused.encoder_qkv
    flat[:, layout.encoder_keys.start : layout.encoder_values.stop] = qkv[:, width:]
    attended = chain.attend(per_item(qkv[:, :width]), ENCODER_PLANE)
    x = x + attended.reshape(rows, width) @ wo
    source = x + feed_forward(x, f_in, f_out)
    flat[:, layout.source] = source
    flat[:, layout.shared_keys.start : layout.shared_values.stop] = source @ fused.shared_kv

    x = source
    own = local.shape[1] - q  # the chain's new rows come last in the local window
    for index, layer in enumerate(w.layers):
        projected = rms_norm(x) @ fused.layer_in[index]  # local q | local k | local v | cross q
        pair = slice(layout.local_keys(index).start, layout.local_values(index).stop)
        flat[:, pair] = projected[:, width : 3 * width]
        start = 2 * index * width
        local[:, own:, start : start + 2 * width] = per_item(projected[:, width : 3 * width])
        local_out = attend_window(
            per_item(projected[:, :width]),
            local[..., start : start + width],
            local[..., start + width : start + 2 * width],
            local_bias,
            k + q,
            model.window,
        )
        cross = chain.attend(per_item(projected[:, 3 * width :]), SHARED_PLANE)
        mixed = np.concatenate([local_out, cross], axis=-1).reshape(rows, 2 * width)
        x = x + mixed @ fused.layer_out[index]
        x = x + feed_forward(x, layer[6], fused.feed_out[index])
    flat[:, layout.logits] = rms_norm(x) @ w.head
    return BatchRows([Rows(flat[b * q : (b + 1) * q], layout) for b in range(size)], flat)


def _chain_local(
    model: TinyModel,
    context: BatchContext,
    positions: np.ndarray,
    earlier: np.ndarray | None,
    causal: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Local-window keys for a chain batch: the stored window rows (padded), the earlier
    rows, then room for the new rows; and the mask by position (plus causality)."""
    size, q = positions.shape
    k = 0 if earlier is None else earlier.shape[1]
    l_max = context.local.shape[1]
    room = context.local_room
    if room is not None and room.shape[1] >= l_max + k + q:
        local = room[:, : l_max + k + q]  # the stored rows are already in place
    else:
        local = np.empty((size, l_max + k + q, context.local.shape[2]))
        local[:, :l_max] = context.local
    local_positions = np.empty((size, l_max + k + q), dtype=np.int64)
    local_positions[:, :l_max] = context.local_positions
    local_positions[:, l_max + k :] = positions
    if earlier is not None:
        local[:, l_max : l_max + k] = earlier[..., model.layout.local]
        local_positions[:, l_max : l_max + k] = positions[:, :1] - np.arange(k, 0, -1)
    visible = local_positions[:, None, :] > (positions - model.window)[:, :, None]
    visible[:, :, l_max:] &= causal
    return local, mask_bias(visible)
