"""Attention for the chain path: global attention over stored rows plus the chain (in place or
padded, long chains in blocks of queries), local attention over sliding windows."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...rows import BatchContext, planes
from ..layers import attend, mask_bias
from .halves import attend_split
from .keys import attend_two

# When a long chain's local attention runs over sliding windows (measured, one BLAS thread): a
# masked score costs ~8.5 ns, while each windowed query costs about as much as 48 scores and each
# windowed call as 5,000; the windows are taken when they save more than that.
WINDOW_QUERY_SCORES = 48
WINDOW_CALL_SCORES = 5_000
# A batch of long chains runs global attention in blocks of this many queries when the chains
# are at least as long as the stored rows and hold this many query rows in all (measured: 15-33%
# faster there; slower with short chains or long stored contexts, where blocks re-read keys).
CAUSAL_BLOCK_ROWS = 32
CAUSAL_BLOCK_MIN_QUERIES = 256


class ChainAttention:
    """Global attention for a chain batch (see `chain.chain_rows`): each query sees the
    stored rows plus the chain's rows up to itself.

    A single item reads its stored rows in place (no padding copy) with 2-D products, which
    take the strided planes as they are; a padded batch writes the chain into the context's
    tail, after the padding, and masks the padding.
    """

    def __init__(
        self,
        context: BatchContext,
        out: np.ndarray,
        earlier: np.ndarray | None,
        k: int,
        width: int,
    ) -> None:
        self.out, self.k, self.width = out, k, width
        self.written: set[int] = set()  # planes whose new rows are in place
        size, q, _ = out.shape
        self.q, self.chain = q, k + q
        # Query i (chain row k + i) sees chain rows 0..k + i.
        self.causal = np.arange(self.chain)[None, :] <= (k + np.arange(q))[:, None]
        globals_width = 4 * width
        self.merged = context.merged
        if not self.merged:
            self.stored = context.globals[0]  # (4, C, W): views into the pool if contiguous
            self.tail = np.empty((4, self.chain, width))
            if earlier is not None:
                self.tail[:, :k] = planes(earlier[0, :, :globals_width], width)
            self.chain_bias = mask_bias(self.causal)
            return
        context.reserve(self.chain)
        self.padded, c = context.globals, context.stored
        self.stored_rows = c  # padded: the chain's rows follow the stored ones
        self.span = c + self.chain
        if earlier is not None:
            self.padded[:, :, c : c + k] = planes(earlier[..., :globals_width], width)
        # Only `batch_context` pads, and it makes the stored rows' mask once for the round.
        assert context.stored_bias is not None
        self.bias = np.empty((size, q, self.span))
        self.bias[..., :c] = context.stored_bias[:, None, :]
        self.bias[..., c:] = mask_bias(self.causal)

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        """Attention of (B, q, W) queries over key plane `plane` and value plane `plane + 1`,
        once the new rows' keys and values are in `out`."""
        width, k = self.width, self.k
        if plane not in self.written:  # every consumer layer reads the same shared planes
            self.written.add(plane)
            new = planes(self.out[..., plane * width : (plane + 2) * width], width)  # (B, 2, q, W)
            if self.merged:
                self.padded[:, plane : plane + 2, self.stored_rows + k : self.span] = new
            else:
                self.tail[plane : plane + 2, k:] = new[0]
        if self.merged:
            return self._attend_padded(queries, plane)
        stored, tail = self.stored, self.tail
        # 2-D products: the stored planes are read in place, whatever their strides.
        mixed = attend_two(
            queries.reshape(self.q, width),
            (stored[plane], stored[plane + 1], None),
            (tail[plane], tail[plane + 1], self.chain_bias),
        )
        return mixed.reshape(1, self.q, width)

    def _attend_padded(self, queries: np.ndarray, plane: int) -> np.ndarray:
        keys = self.padded[:, plane, : self.span]
        values = self.padded[:, plane + 1, : self.span]
        if not blocks_pay(len(queries), self.q, self.stored_rows, self.chain):
            return attend_split(queries, keys, values, self.bias)
        # A long chain (a prefill) in blocks of queries, each over the keys up to its last
        # row: the later chain rows are masked for it anyway (a quarter less work at 2).
        out = np.empty_like(queries)
        for low in range(0, self.q, CAUSAL_BLOCK_ROWS):
            high = min(self.q, low + CAUSAL_BLOCK_ROWS)
            reach = self.stored_rows + self.k + high
            out[:, low:high] = attend_split(
                queries[:, low:high],
                keys[:, :reach],
                values[:, :reach],
                self.bias[:, low:high, :reach],
            )
        return out


def blocks_pay(size: int, queries: int, stored: int, chain: int) -> bool:
    """Blocks of queries pay for a batch of long chains at least as long as their stored rows."""
    many = queries > CAUSAL_BLOCK_ROWS and size * queries >= CAUSAL_BLOCK_MIN_QUERIES
    return many and stored <= chain


def windows_pay(windowed: int, keys: int) -> bool:
    """Sliding windows pay when `windowed` queries each skip scoring most of `keys` rows."""
    return windowed * (keys - WINDOW_QUERY_SCORES) >= WINDOW_CALL_SCORES


def attend_window(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    bias: np.ndarray,
    contiguous: int,
    window: int,
) -> np.ndarray:
    """Local attention of a chain's new rows (the last of `keys`' rows; the last `contiguous`
    rows hold consecutive positions). A query whose `window` rows all lie among those sees
    exactly them, so a long chain (a prefill) attends over sliding windows of the keys:
    O(q x window) scores instead of O(q x rows). The first queries take the masked path."""
    size, count = q.shape[:2]
    head = min(count, max(0, window - 1 - (contiguous - count)))  # reach before the chain
    if not windows_pay(size * (count - head), keys.shape[1]):
        return attend(q, keys, values, bias)
    out = np.empty_like(q)
    if head:
        out[:, :head] = attend(q[:, :head], keys, values, bias[:, :head])
    # Window j covers rows [first + j, first + j + window); query `head` ends at its own row.
    first = keys.shape[1] - contiguous
    start = contiguous - count + head - window + 1
    rows = slice(start, start + count - head)
    key_windows = sliding_window_view(keys[:, first:], window, axis=1)[:, rows]
    value_windows = sliding_window_view(values[:, first:], window, axis=1)[:, rows]
    scores = (q[:, head:, None, :] @ key_windows)[:, :, 0, :]  # (B, n, window), all visible
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    mixed = (scores[:, :, None, :] @ value_windows.swapaxes(-1, -2))[:, :, 0, :]
    out[:, head:] = mixed / scores.sum(axis=-1, keepdims=True)
    return out
