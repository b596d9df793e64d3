"""The engine's forward, plainly: the new rows of many requests against their stored rows, in
one vectorised, tree-masked pass.

Each new row attends to its request's stored rows plus its own ancestors (and itself) among
this call's rows, under each attention's rule: the causal encoder and the causal
cross-attention over shared K/V see every earlier position, the consumers' local attention a
sliding window of `window` positions. Rows computed by an earlier call this round (a draft's
earlier levels) come first among "this call's rows", so a tree can grow level by level.

This is what `fast_paths=False` runs for every batch: fresh arrays, stored rows padded and
concatenated with the new ones on every call. `fastpaths/` computes the same rows faster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..rows import BatchContext, BatchRows, Layout, RowBatchItem, Rows, planes
from .layers import ENCODER_PLANE, FAR, SHARED_PLANE, attend, feed_forward, mask_bias, rms_norm
from .masks import ancestor_mask, ragged_index

if TYPE_CHECKING:
    from .tinymodel import TinyModel

Scratch = Callable[[str, tuple[int, ...]], np.ndarray]  # (name, shape) -> a work array


def fresh(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A new zeroed array every call (the plain forward keeps nothing between calls)."""
    return np.zeros(shape)


def plain_rows(
    model: TinyModel, batch: list[RowBatchItem], context: BatchContext | None = None
) -> list[Rows]:
    """The new rows of every item, by the plain tree-masked forward."""
    if not batch:
        return []
    return tree_rows(model, batch, plain_context(model, batch) if context is None else context)


def plain_context(model: TinyModel, batch: list[RowBatchItem]) -> BatchContext:
    """Every item's stored rows copied into fresh arrays, padded to the longest (the padding
    is masked by `length`) and its local window rows likewise (padding at position FAR)."""
    layout, width = model.layout, model.width
    size = len(batch)
    lengths = np.array([item.encoder_length for item in batch], dtype=np.int64)
    stored, window = int(lengths.max()), max(len(item.local_positions) for item in batch)
    globals_ = np.zeros((size, 4, stored, width))
    local = np.zeros((size, window, 2 * model.depth * width))
    local_positions = np.full((size, window), FAR, dtype=np.int64)
    for b, item in enumerate(batch):
        globals_[b, :, : lengths[b]] = planes(item.context.columns(layout.globals), width)
        count = len(item.local_positions)
        if count:
            local[b, :count] = item.local.columns(layout.local)
            local_positions[b, :count] = item.local_positions
    return BatchContext(
        globals_,
        lengths,
        local,
        local_positions,
        lower=np.array([item.local_lower for item in batch], dtype=np.int64),
        consumer_from=np.array([item.consumer_from for item in batch], dtype=np.int64),
        ragged=bool((lengths < stored).any()),
        stored=stored,
        stored_bias=mask_bias(np.arange(stored)[None, :] < lengths[:, None]),
    )


class NewRows:
    """This call's rows of every item, padded per item: the queries (B, Q), and the "extras"
    (B, E, F): earlier rows, then new rows, where the new rows' columns are stored as the
    forward computes them (`put`)."""

    def __init__(
        self, batch: list[RowBatchItem], context: BatchContext, row_size: int, scratch: Scratch
    ) -> None:
        size = len(batch)
        self.counts = np.array([len(item.tokens) for item in batch], dtype=np.int64)
        earlier = np.array([len(item.earlier_positions) for item in batch], dtype=np.int64)
        q_max, e_counts = int(self.counts.max()), earlier + self.counts
        e_max = int(e_counts.max())
        # Flat -> padded scatter indices of the new rows, as queries and as extras.
        self.q_batch, self.q_rows = ragged_index(self.counts)
        self.e_rows = self.q_rows + np.repeat(earlier, self.counts)
        index = (self.q_batch, self.q_rows)
        self.tokens = np.zeros((size, q_max), dtype=np.int64)
        self.positions = np.zeros((size, q_max), dtype=np.int64)
        self.tokens[index] = np.concatenate([item.tokens for item in batch])
        self.positions[index] = np.concatenate([item.positions for item in batch])
        valid = np.zeros((size, q_max), dtype=bool)
        valid[index] = True
        self.replay = np.array([item.replay for item in batch], dtype=np.int64)
        full = valid & (np.arange(q_max)[None, :] >= self.replay[:, None])
        self.consumer = valid & (self.positions >= context.consumer_from[:, None])

        self.e_positions = np.full((size, e_max), FAR, dtype=np.int64)
        self.e_full = np.zeros((size, e_max), dtype=bool)
        parents = np.full((size, e_max), -1, dtype=np.int64)
        self.extras = scratch("extras", (size, e_max, row_size))
        new = (self.q_batch, self.e_rows)
        self.e_positions[new] = self.positions[index]
        self.e_full[new] = full[index]
        parents[new] = np.concatenate([item.parents for item in batch])
        if earlier.any():
            rows = ragged_index(earlier)
            self.e_positions[rows] = np.concatenate([i.earlier_positions for i in batch])
            self.e_full[rows] = np.concatenate([i.earlier_full for i in batch])
            parents[rows] = np.concatenate([i.earlier_parents for i in batch])
            self.extras[rows] = np.concatenate(
                [i.earlier.data for i in batch if i.earlier is not None and len(i.earlier)]
            )
        # ancestor[b, i, j]: extra row j is query i itself or one of its ancestors.
        self.ancestor = ancestor_mask(parents, e_counts, earlier, q_max) & valid[:, :, None]

    def put(self, columns: slice, values: np.ndarray) -> None:
        """Store the new rows' `columns` (values padded like the queries) in `extras`."""
        self.extras[..., columns][self.q_batch, self.e_rows] = values[self.q_batch, self.q_rows]


@dataclass
class Masks:
    """Which keys each query sees, built once per call and shared by every layer."""

    stored: np.ndarray  # (B, Q, C): stored rows, causal (replay rows) and within length
    extras: np.ndarray  # (B, Q, E): the query's ancestors among full extras
    local_bias: np.ndarray  # (B, Q, L + E): the window over stored window rows, then extras
    local_seen: np.ndarray | None  # (B, Q): a row sees some local key (bounded recovery only)


def masks(window: int, rows: NewRows, context: BatchContext) -> Masks:
    qpos = rows.positions[:, :, None]
    stored = np.arange(context.stored)[None, None, :]
    stored_visible = stored <= qpos  # causal over stored rows (matters for replay rows)
    if context.ragged:
        stored_visible = stored_visible & (stored < context.length[:, None, None])
    reach = qpos - window
    lower = context.lower[:, None, None]
    local_ctx = context.local_positions[:, None, :]
    local_ctx_visible = (local_ctx > reach) & (local_ctx >= lower) & (local_ctx <= qpos)
    e_positions = rows.e_positions[:, None, :]
    local_ext_visible = rows.ancestor & (e_positions > reach) & (e_positions >= lower)
    seen = None
    if context.lower.any():  # a row that sees no local key gets no local update (not a mix)
        seen = local_ctx_visible.any(-1) | local_ext_visible.any(-1)
    return Masks(
        stored_visible,
        rows.ancestor & rows.e_full[:, None, :],
        mask_bias(np.concatenate([local_ctx_visible, local_ext_visible], axis=-1)),
        seen,
    )


class GlobalKeys(Protocol):
    """Global attention (encoder, cross) over the stored rows and this call's extras."""

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        """(B, Q, W) queries over key plane `plane` and value plane `plane + 1`, once the new
        rows' keys and values are in the extras."""
        ...


KeysFactory = Callable[[BatchContext, NewRows, Masks, int], GlobalKeys]


class ConcatenatedKeys:
    """The plain way: each attention concatenates the stored rows' planes and the extras'."""

    def __init__(self, context: BatchContext, rows: NewRows, seen: Masks, width: int) -> None:
        self.stored = context.globals[:, :, : context.stored]
        self.rows, self.width = rows, width
        self.bias = mask_bias(np.concatenate([seen.stored, seen.extras], axis=-1))

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        width = self.width
        new = planes(self.rows.extras[..., plane * width : (plane + 2) * width], width)
        keys = np.concatenate([self.stored[:, plane], new[:, 0]], axis=1)
        values = np.concatenate([self.stored[:, plane + 1], new[:, 1]], axis=1)
        return attend(queries, keys, values, self.bias)


def tree_rows(
    model: TinyModel,
    batch: list[RowBatchItem],
    context: BatchContext,
    *,
    scratch: Scratch = fresh,
    keys: KeysFactory = ConcatenatedKeys,
) -> BatchRows:
    """Compute the new rows of every item in one tree-masked pass over `context`.

    `scratch` gives the extras array and `keys` the global attention: the fast paths pass
    reused work buffers and attention that reads padded or stored rows in place."""
    w, fused, layout, width = model.weights, model.fused, model.layout, model.width
    rows = NewRows(batch, context, layout.size, scratch)
    seen = masks(model.window, rows, context)
    global_keys = keys(context, rows, seen, width)

    # Encoder over every new row (replay rows take their stored source instead).
    wo, f_in, f_out = w.encoder[3:]
    x = model.embed(rows.tokens, rows.positions)
    qkv = rms_norm(x) @ fused.encoder_qkv
    rows.put(slice(layout.encoder_keys.start, layout.encoder_values.stop), qkv[..., width:])
    x = x + global_keys.attend(qkv[..., :width], ENCODER_PLANE) @ wo
    source = x + feed_forward(x, f_in, f_out)
    for b, item in enumerate(batch):
        if item.replay:
            replayed = item.positions[: item.replay]
            source[b, : item.replay] = item.context.columns(layout.source, replayed)
    shared = source @ fused.shared_kv
    rows.put(slice(layout.shared_keys.start, layout.shared_values.stop), shared)
    rows.put(layout.source, source)

    # Consumers: sliding local window + causal cross-attention over shared K/V.
    x = source
    for index, layer in enumerate(w.layers):
        projected = rms_norm(x) @ fused.layer_in[index]  # local q | local k | local v | cross q
        pair = slice(layout.local_keys(index).start, layout.local_values(index).stop)
        rows.put(pair, projected[..., width : 3 * width])
        stored_kv = context.local[..., 2 * index * width : (2 * index + 2) * width]
        local_kv = np.concatenate([stored_kv, rows.extras[..., pair]], axis=1)
        local = attend(
            projected[..., :width], local_kv[..., :width], local_kv[..., width:], seen.local_bias
        )
        if seen.local_seen is not None:
            local = local * seen.local_seen[:, :, None]
        cross = global_keys.attend(projected[..., 3 * width :], SHARED_PLANE)
        x = x + np.concatenate([local, cross], axis=-1) @ fused.layer_out[index]
        x = x + feed_forward(x, layer[6], fused.feed_out[index])
    return _new_rows(rows, rms_norm(x) @ w.head, layout)


def _new_rows(rows: NewRows, logits: np.ndarray, layout: Layout) -> BatchRows:
    """The new rows out of the extras, flat in batch order, with their logits."""
    new = rows.extras[rows.q_batch, rows.e_rows]
    new[:, layout.logits] = logits[rows.q_batch, rows.q_rows]
    skipped = ~rows.consumer[rows.q_batch, rows.q_rows]
    if skipped.any():  # compact recovery: these rows never ran the consumers
        new[skipped, layout.local.start :] = 0.0
    bounds = [0, *np.cumsum(rows.counts).tolist()]
    parts = [Rows(new[bounds[b] : bounds[b + 1]], layout) for b in range(len(rows.counts))]
    return BatchRows(parts, new)
