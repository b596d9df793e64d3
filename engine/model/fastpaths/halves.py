"""Large attentions on two cores: the query rows in two halves, one on a worker thread.

A long prefill spends most of its round in global attention (a chunk of 256 queries against up
to thousands of keys, four times a layer stack), and NumPy releases the GIL inside matrix
products, `exp` and reductions over large arrays: the two halves then run at once. Each query
row's softmax reads only that row, so a half computes the rows the whole call would, to
rounding: a BLAS may tile a product of fewer rows differently (OpenBLAS's AVX-512 kernels do),
which moves the last bits, never more than the exactness contract's 1e-10.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..layers import attend

# Halves pay once a call scores this many query-key pairs (measured on 2 cores: 1.3-1.8x at
# 256 queries x 1,000-2,000 keys; the hand-off costs tens of microseconds, the scores of a
# 24-request decode step fewer than that).
HALVES_MIN_SCORES = 1 << 17
# Rows are split at a multiple of this, as the matrix kernels tile rows (on many machines the
# halves then round as the whole call does; the tests ask only for agreement to rounding).
HALVES_ROW_ALIGN = 8

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def halves_pay(rows: int, scores: int) -> bool:
    """Two halves pay for a call of `scores` query-key pairs on a machine with two cores."""
    return scores >= HALVES_MIN_SCORES and rows >= 2 * HALVES_ROW_ALIGN and _cores() >= 2


def attend_split(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """`layers.attend`, in two halves of the query rows when they pay."""
    rows = q.shape[-2]

    def part(of: slice) -> np.ndarray:
        return attend(q[..., of, :], keys, values, rows_of(bias, of, rows))

    return by_rows(q, keys.shape[-2], values.shape[-1], part)


def by_rows(
    q: np.ndarray, keys: int, width: int, compute: Callable[[slice], np.ndarray]
) -> np.ndarray:
    """`compute(rows)` of every query row of `q` (against `keys` keys, `width` values wide):
    in one call, or in two halves, the first on the worker thread, when they pay."""
    rows = q.shape[-2]
    if not halves_pay(rows, q[..., 0].size * keys):
        return compute(slice(0, rows))
    middle = (rows // 2) // HALVES_ROW_ALIGN * HALVES_ROW_ALIGN
    first, second = slice(0, middle), slice(middle, rows)
    out = np.empty((*q.shape[:-1], width))
    # The caller's context goes with the work: NumPy keeps its error state (`np.errstate`,
    # which the runner sets so an overflow fails one request, silently) in a context variable.
    context = contextvars.copy_context()
    pending: Future[np.ndarray] = _worker().submit(context.run, compute, first)
    try:
        out[..., second, :] = compute(second)
    finally:
        result = pending.result()  # never leave the worker writing after we return
    out[..., first, :] = result
    return out


def rows_of(bias: np.ndarray | None, part: slice, rows: int) -> np.ndarray | None:
    """The bias of query rows `part` (a bias broadcast over the rows stays whole)."""
    if bias is None or bias.ndim < 2 or bias.shape[-2] != rows:
        return bias
    return bias[..., part, :]


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _worker() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-attention")
        return _executor
