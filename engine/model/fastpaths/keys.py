"""Global attention of the tree forward without concatenating keys: this call's rows written
into a padded context's tail, or a lone item's stored rows read in place."""

from __future__ import annotations

import numpy as np

from ...rows import BatchContext, planes
from ..batched import GlobalKeys, Masks, NewRows
from ..layers import ENCODER_PLANE, NEG, mask_bias
from .halves import attend_split, by_rows, rows_of


def in_place_keys(context: BatchContext, rows: NewRows, seen: Masks, width: int) -> GlobalKeys:
    """The tree forward's global attention for `context`: into its tail when it is padded."""
    if context.merged:
        return TailKeys(context, rows, seen, width)
    return SplitKeys(context, rows, seen, width)


class TailKeys:
    """A padded context carries room after its stored rows: this call's rows are written there
    once per plane pair, so each attention runs over one key set without a copy."""

    def __init__(self, context: BatchContext, rows: NewRows, seen: Masks, width: int) -> None:
        extras = rows.extras.shape[1]
        context.reserve(extras)
        self.globals, self.rows, self.width = context.globals, rows, width
        self.tail = slice(context.stored, context.stored + extras)
        self.span = slice(0, context.stored + extras)
        self.bias = mask_bias(np.concatenate([seen.stored, seen.extras], axis=-1))
        self.written: set[int] = set()

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        width, g = self.width, self.globals
        if plane not in self.written:  # every consumer layer reads the same shared planes
            self.written.add(plane)
            columns = self.rows.extras[..., plane * width : (plane + 2) * width]
            g[:, plane : plane + 2, self.tail] = planes(columns, width)
        keys, values = g[:, plane, self.span], g[:, plane + 1, self.span]
        return attend_split(queries, keys, values, self.bias)


class SplitKeys:
    """A lone item's stored rows (views into the pool) and its extras as two key sets."""

    def __init__(self, context: BatchContext, rows: NewRows, seen: Masks, width: int) -> None:
        self.globals, self.extras, self.width = context.globals, rows.extras, width
        # The stored rows need a mask only when padded or for replay rows (causal there); the
        # encoder's replay rows are discarded (their stored source is taken), so it skips it.
        stored = mask_bias(seen.stored) if (context.ragged or rows.replay.any()) else None
        self.encoder_bias = stored if context.ragged else None
        self.shared_bias = stored
        self.extras_bias = mask_bias(seen.extras)

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        width, g, extras = self.width, self.globals, self.extras
        stored_bias = self.encoder_bias if plane == ENCODER_PLANE else self.shared_bias
        return attend_two(
            queries,
            (g[:, plane], g[:, plane + 1], stored_bias),
            (
                extras[..., plane * width : (plane + 1) * width],
                extras[..., (plane + 1) * width : (plane + 2) * width],
                self.extras_bias,
            ),
        )


def attend_two(
    q: np.ndarray,
    first: tuple[np.ndarray, np.ndarray, np.ndarray | None],
    second: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Softmax attention over two key sets without concatenating them (keeps a long stored
    context a zero-copy view); in two halves of the query rows when they pay."""
    (k1, v1, b1), (k2, v2, b2) = first, second
    rows = q.shape[-2]

    def part(of: slice) -> np.ndarray:
        return _attend_two(
            q[..., of, :], (k1, v1, rows_of(b1, of, rows)), (k2, v2, rows_of(b2, of, rows))
        )

    return by_rows(q, k1.shape[-2] + k2.shape[-2], v1.shape[-1], part)


def _attend_two(
    q: np.ndarray,
    first: tuple[np.ndarray, np.ndarray, np.ndarray | None],
    second: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    (k1, v1, b1), (k2, v2, b2) = first, second
    # OpenBLAS multiplies a few query rows by many keys about twice as fast when the queries
    # are column-major (measured 43 vs 81 us for 5 x 4096 keys; the same for 1 or 8+ rows).
    # Measured for 2-D products only: stacked ones were slower that way.
    s1 = (np.asfortranarray(q) if q.ndim == 2 else q) @ k1.swapaxes(-1, -2)
    if b1 is not None:
        s1 += b1
    s2 = q @ k2.swapaxes(-1, -2)
    s2 += b2
    top = np.maximum(s1.max(axis=-1, keepdims=True, initial=NEG), s2.max(axis=-1, keepdims=True))
    s1 -= top
    s2 -= top
    np.exp(s1, out=s1)
    np.exp(s2, out=s2)
    total = s1.sum(axis=-1, keepdims=True) + s2.sum(axis=-1, keepdims=True)
    return (s1 @ v1 + s2 @ v2) / total
