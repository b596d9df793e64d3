"""Batch contexts without copying: one item's rows read in place, a batch's padded rows kept
in work buffers across calls (a slot that held the same `context_key` copies only new rows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...rows import BatchContext, Joined, RowBatchItem, Rows, Stored, planes
from ..layers import FAR, mask_bias
from .buffers import WorkBuffers

if TYPE_CHECKING:
    from ..tinymodel import TinyModel

PADDED_ROWS = 256  # padded batch contexts start with room for this many rows


def reads_in_place(batch: list[RowBatchItem]) -> bool:
    """A lone item's stored rows are attended where they are: nothing to pad."""
    return len(batch) == 1


def batch_context(
    model: TinyModel,
    work: WorkBuffers,
    batch: list[RowBatchItem],
    tail: int = 0,
    name: str = "globals",
    local_room: bool = True,
) -> BatchContext:
    """Pad the stored rows of a batch once, in buffer `name`; a single item is used without
    copying. `tail` rows of room follow the stored ones (for the window rows too unless
    `local_room` is False: the tree forward concatenates its own)."""
    layout = model.layout
    lengths = np.array([item.encoder_length for item in batch], dtype=np.int64)
    lower = np.array([item.local_lower for item in batch], dtype=np.int64)
    consumer_from = np.array([item.consumer_from for item in batch], dtype=np.int64)
    if reads_in_place(batch):
        item = batch[0]
        return BatchContext(
            _context_planes(model, item.context)[None],
            lengths,
            item.local.columns(layout.local)[None],
            np.asarray(item.local_positions, dtype=np.int64)[None, :],
            lower,
            consumer_from,
            False,
            int(lengths[0]),
        )
    size = len(batch)
    local_counts = [len(item.local_positions) for item in batch]
    c_max, l_max = int(lengths.max()), max(local_counts)
    globals_ = _padded_globals(model, work, name, batch, c_max + tail)
    # Padding rows keep whatever an earlier call left there: their positions mask them.
    rows = l_max + (tail if local_room else 0)
    room = work.scratch(name + " local", (size, rows, 2 * model.depth * model.width))
    local_positions = np.full((size, l_max), FAR, dtype=np.int64)
    window_rows = _window_rows(batch, l_max) if l_max else None
    if window_rows is not None:  # every item holds l_max window rows: one gather
        store, slots = window_rows
        room[:, :l_max] = Stored(store, slots).columns(layout.local).reshape(size, l_max, -1)
    for b, item in enumerate(batch):
        count = local_counts[b]
        if count:
            if window_rows is None:
                room[b, :count] = item.local.columns(layout.local)
            local_positions[b, :count] = item.local_positions
    return BatchContext(
        globals_,
        lengths,
        room[:, :l_max],
        local_positions,
        lower,
        consumer_from,
        bool((lengths < c_max).any()),
        c_max,
        local_room=room,
        stored_bias=mask_bias(np.arange(c_max)[None, :] < lengths[:, None]),
    )


def _context_planes(model: TinyModel, context: Rows | Stored | Joined) -> np.ndarray:
    """(4, C, W) planes of a context's stored rows (views for a run of pool slots)."""
    if isinstance(context, Stored):
        return context.planes()
    return planes(context.columns(model.layout.globals), model.width)


def _padded_globals(
    model: TinyModel, work: WorkBuffers, name: str, batch: list[RowBatchItem], rows: int
) -> np.ndarray:
    """(B, 4, rows, W) planes of every item's stored rows, in a reusable buffer.

    A slot that held the same `context_key` last time keeps those rows and copies only the
    new ones: in steady decoding a round copies one row per request, not whole histories.
    """
    width = model.width
    # Once histories are kept here, start with room for a few hundred rows: growing later
    # copies every history held (a visible pause in a live session).
    kept = any(item.encoder_length for item in batch)
    capacity = max(rows, PADDED_ROWS) if kept else rows
    padded = work.scratch(name, (len(batch), 4, capacity, width))[:, :, :rows]
    filled = work.kept(name)
    # Steady decoding reads one new row per item: those are gathered in one operation.
    single_items: list[int] = []
    single_rows: list[int] = []
    single_slots: list[int] = []
    store = None
    for b, item in enumerate(batch):
        count, key = item.encoder_length, item.context_key
        start = 0
        held = filled.get(b)
        if key is not None and held is not None and held[0] == key:
            start = min(held[1], count)
        # Only rows below `count` are claimed: later ones may be overwritten as padding.
        filled[b] = (key, count)
        if start == count:
            continue
        context = item.context
        if isinstance(context, Stored):  # only the missing slots are read
            index = context.index
            if count - start == 1 and (store is None or context.store is store):
                store = context.store
                single_items.append(b)
                single_rows.append(start)
                single_slots.append(
                    index.start + start if isinstance(index, slice) else index[start]
                )
                continue
            if isinstance(index, slice):
                index = slice(index.start + start, index.start + count)
            else:
                index = index[start:count]
            padded[b, :, start:count] = context.store.planes[:, index]
        else:
            stored = context.columns(model.layout.globals)[start:count]
            padded[b, :, start:count] = planes(stored, width)
    if store is not None:
        gathered = store.planes[:, single_slots].swapaxes(0, 1)
        padded[single_items, :, single_rows] = gathered
    return padded


def _window_rows(batch: list[RowBatchItem], count: int) -> tuple[object, np.ndarray] | None:
    """The pool slots of every item's local window rows, item after item, when each item
    holds `count` of them in the same store (steady decoding); else None."""
    store = None
    slots = []
    for item in batch:
        local = item.local
        if not isinstance(local, Stored) or len(local) != count:
            return None
        if store is None:
            store = local.store
        elif local.store is not store:
            return None
        index = local.index
        slots.append(np.arange(index.start, index.stop) if isinstance(index, slice) else index)
    return store, np.concatenate(slots)
