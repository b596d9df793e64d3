"""Long prefills chunk by chunk: memory O(chunk x context) instead of O(context^2)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...rows import Joined, Layout, RowBatchItem, Rows, Stored

PREFILL_CHUNK = 256  # rows per chunk of a long prefill


def long_prefills(batch: list[RowBatchItem]) -> list[int]:
    """The items that are one chain of more than PREFILL_CHUNK new rows after their stored
    rows (no rows from an earlier call): those are computed chunk by chunk."""
    return [
        i
        for i, item in enumerate(batch)
        if len(item.tokens) > PREFILL_CHUNK
        and item.earlier is None
        and np.array_equal(item.parents, np.arange(len(item.tokens)) - 1)
    ]


def chunked_rows(
    item: RowBatchItem,
    layout: Layout,
    window: int,
    compute: Callable[[list[RowBatchItem]], list[Rows]],
) -> Rows:
    """A long chain in chunks, each computed by `compute`: each chunk attends to the stored
    rows plus the chunks before it."""
    done: list[Rows] = []
    start = 0
    total = len(item.tokens)
    while start < total:
        stop = min(total, start + PREFILL_CHUNK)
        computed = Rows.concat(done) if done else Rows.empty(layout)
        full_done = max(0, len(computed) - item.replay)  # full rows extend the context
        context = (
            item.context
            if not full_done
            else Joined(item.context, computed.take(slice(item.replay, None)))
        )
        local, local_positions = _chunk_window(item, computed, start, window)
        chunk = RowBatchItem(
            context=context,
            local=local,
            local_positions=local_positions,
            tokens=item.tokens[start:stop],
            positions=item.positions[start:stop],
            parents=np.arange(stop - start) - 1,
            replay=max(0, min(item.replay, stop) - start),
            local_lower=item.local_lower,
            consumer_from=item.consumer_from,
        )
        done.extend(compute([chunk]))
        start = stop
    return Rows.concat(done)


def _chunk_window(
    item: RowBatchItem, computed: Rows, start: int, window: int
) -> tuple[Rows | Stored | Joined, np.ndarray]:
    """The window rows (and their positions) the chunk starting at new row `start` reads."""
    if start == 0:
        return item.local, item.local_positions
    # The window may reach past this call's earlier chunks into stored rows.
    low = int(item.positions[start]) - (window - 1)
    kept = int(np.count_nonzero(item.local_positions >= low))
    reach = max(0, start - (window - 1))
    local: Rows | Stored | Joined = computed.take(slice(reach, start))
    local_positions = item.positions[reach:start]
    if kept:
        assert not isinstance(item.local, Joined)  # only chunks are joined
        local = Joined(_last_rows(item.local, kept), local)
        local_positions = np.concatenate(
            [item.local_positions[len(item.local_positions) - kept :], local_positions]
        )
    return local, local_positions


def _last_rows(rows: Rows | Stored, count: int) -> Rows | Stored:
    """The last `count` rows of a stored or computed set of rows."""
    if isinstance(rows, Rows):
        return rows.take(slice(len(rows) - count, len(rows)))
    index = rows.index
    if isinstance(index, slice):
        return Stored(rows.store, slice(index.stop - count, index.stop))
    return Stored(rows.store, index[len(index) - count :])
