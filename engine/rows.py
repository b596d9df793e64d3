"""Per-position rows and the containers a forward reads and writes.

A model's state for one position is one packed row (`Layout` names its columns); `Rows` holds
rows computed by a forward or copied out of the pool, `Stored` reads them lazily where the pool
keeps them, and `Joined` puts computed rows after stored ones. `RowBatchItem` is one request's
part of a batched forward and `BatchContext` the stored rows a batch attends to, padded once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def planes(rows: np.ndarray, width: int) -> np.ndarray:
    """(..., n, k·W) columns as (..., k, n, W) planes: a view, no copy."""
    split = rows.reshape((*rows.shape[:-1], rows.shape[-1] // width, width))
    return split.swapaxes(-2, -3)


class Layout:
    """Column layout of one model's packed per-position row.

    [encoder K | encoder V | shared K | shared V | source | local K,V per layer | logits]
    The first four blocks are contiguous so global attention reads them in one slice.
    """

    def __init__(self, width: int, depth: int, vocab_size: int) -> None:
        w = width
        self.width, self.depth, self.vocab_size = width, depth, vocab_size
        self.encoder_keys = slice(0, w)
        self.encoder_values = slice(w, 2 * w)
        self.shared_keys = slice(2 * w, 3 * w)
        self.shared_values = slice(3 * w, 4 * w)
        self.globals = slice(0, 4 * w)
        self.source = slice(4 * w, 5 * w)
        self.local = slice(5 * w, 5 * w + 2 * depth * w)
        self.logits = slice(5 * w + 2 * depth * w, 5 * w + 2 * depth * w + vocab_size)
        self.size = self.logits.stop

    def local_keys(self, layer: int) -> slice:
        start = self.local.start + 2 * layer * self.width
        return slice(start, start + self.width)

    def local_values(self, layer: int) -> slice:
        start = self.local.start + (2 * layer + 1) * self.width
        return slice(start, start + self.width)


class Rows:
    """Packed per-position rows (n, layout.size): from the pool, a forward, or the oracle.

    One array per set of rows keeps pool reads and writes to a single NumPy operation; the
    named properties are views into it.
    """

    __slots__ = ("data", "layout")

    def __init__(self, data: np.ndarray, layout: Layout) -> None:
        self.data = data
        self.layout = layout

    @classmethod
    def empty(cls, layout: Layout, count: int = 0) -> Rows:
        return cls(np.zeros((count, layout.size)), layout)

    def __len__(self) -> int:
        return len(self.data)

    def take(self, index: slice | np.ndarray | list[int]) -> Rows:
        return Rows(self.data[index], self.layout)

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        return Rows(np.concatenate([p.data for p in parts]), parts[0].layout)

    def _column(self, columns: slice) -> np.ndarray:
        return self.data[:, columns]

    def columns(self, columns: slice, rows: np.ndarray | None = None) -> np.ndarray:
        """Some columns of all rows (or of `rows`); the shared reading interface of contexts."""
        return self.data[:, columns] if rows is None else self.data[rows, columns]

    @property
    def encoder_keys(self) -> np.ndarray:
        return self._column(self.layout.encoder_keys)

    @property
    def encoder_values(self) -> np.ndarray:
        return self._column(self.layout.encoder_values)

    @property
    def source(self) -> np.ndarray:
        return self._column(self.layout.source)

    @property
    def shared_keys(self) -> np.ndarray:
        return self._column(self.layout.shared_keys)

    @property
    def shared_values(self) -> np.ndarray:
        return self._column(self.layout.shared_values)

    @property
    def local_keys(self) -> np.ndarray:
        """(depth, n, W)"""
        return self._per_layer(self.layout.local_keys)

    @property
    def local_values(self) -> np.ndarray:
        """(depth, n, W)"""
        return self._per_layer(self.layout.local_values)

    def _per_layer(self, columns: Callable[[int], slice]) -> np.ndarray:
        return np.stack([self._column(columns(layer)) for layer in range(self.layout.depth)])

    @property
    def logits(self) -> np.ndarray:
        return self._column(self.layout.logits)


class BatchRows(list[Rows]):
    """A batched forward's rows, one `Rows` per item, which are consecutive slices of one
    array, `flat`: callers check and store a whole batch without concatenating it again."""

    def __init__(self, rows: list[Rows], flat: np.ndarray) -> None:
        super().__init__(rows)
        self.flat = flat


# Shared read-only empty arrays: the common "no earlier rows" case allocates nothing.
_NO_INTS = np.zeros(0, dtype=np.int64)
_NO_INTS.setflags(write=False)
_NO_BOOLS = np.zeros(0, dtype=bool)
_NO_BOOLS.setflags(write=False)


class Stored:
    """A request's rows inside a pool, read lazily: a batch gathers only the columns its
    attention needs, and a contiguous run of blocks is read without copying.

    A plain slotted class, not a dataclass: several are built per request per round."""

    __slots__ = ("index", "store")

    def __init__(self, store: Any, index: slice | np.ndarray) -> None:
        self.store = store  # kv.ModelStore: global-attention `planes`, then `rest` columns
        self.index = index  # slots of the positions, in position order

    def __len__(self) -> int:
        if isinstance(self.index, slice):
            return self.index.stop - self.index.start
        return len(self.index)

    def columns(self, columns: slice, rows: np.ndarray | None = None) -> np.ndarray:
        index = self.index
        if rows is not None:
            index = index.start + rows if isinstance(index, slice) else index[rows]
        split = self.store.split
        if columns.stop <= split:  # global columns: gathered from their planes
            width = self.store.width
            block = self.store.planes[columns.start // width : columns.stop // width, index]
            return block.swapaxes(0, 1).reshape(block.shape[1], columns.stop - columns.start)
        return self.store.rest[index, columns.start - split : columns.stop - split]

    def planes(self) -> np.ndarray:
        """(4, n, W) planes of the rows' global columns: views when the slots are a run."""
        return self.store.planes[:, self.index]


class FinishedRows:
    """What a finished request keeps of its rows once its blocks go back to the pool: every
    position's global-attention planes and `source`, and the full rows of the last `tail`
    positions. With `tail` at least the model's window, its committed state reads nothing else
    (older positions' local and logits columns are dead); copying them too made finishing a
    long request cost milliseconds.
    """

    __slots__ = ("planes", "source", "tail")

    def __init__(self, planes: np.ndarray, source: np.ndarray, tail: Rows) -> None:
        self.planes = planes  # (4, n, W)
        self.source = source  # (n, W)
        self.tail = tail  # full rows of the last positions

    @classmethod
    def empty(cls, layout: Layout) -> FinishedRows:
        width = layout.width
        return cls(np.zeros((4, 0, width)), np.zeros((0, width)), Rows.empty(layout))

    def __len__(self) -> int:
        return self.source.shape[0]

    def rows(self) -> Rows:
        """All n rows, with zeros in the columns that were not kept."""
        layout = self.tail.layout
        count, kept = len(self), len(self.tail)
        data = np.zeros((count, layout.size))
        planes(data[:, layout.globals], layout.width)[...] = self.planes
        data[:, layout.source] = self.source
        data[count - kept :] = self.tail.data
        return Rows(data, layout)


@dataclass(frozen=True)
class Joined:
    """Stored rows followed by rows computed earlier in the same call (a chunked prefill's
    growing context); positions stay contiguous across the join."""

    first: Rows | Stored | Joined
    second: Rows

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def columns(self, columns: slice, rows: np.ndarray | None = None) -> np.ndarray:
        if rows is None:
            return np.concatenate([self.first.columns(columns), self.second.columns(columns)])
        split = len(self.first)
        out = np.empty((len(rows), columns.stop - columns.start))
        low = rows < split
        if low.any():
            out[low] = self.first.columns(columns, rows[low])
        if (~low).any():
            out[~low] = self.second.columns(columns, rows[~low] - split)
        return out


@dataclass
class RowBatchItem:
    """One request's part of a batched `compute_rows` call.

    New rows come in order: `replay` rows first (positions whose encoder state is already in the
    context; only the consumers run), then full rows. `parents[i]` is the index of row i's parent
    among (earlier rows + new rows), or -1 when it hangs off the stored context directly. The
    leading rows of (earlier + new) that form a chain from -1 are the catch-up chain; any other
    row is a tree node.
    """

    context: Rows | Stored | Joined  # stored rows [0, encoder_length): encoder side is read
    local: Rows | Stored | Joined  # rows at `local_positions`: their local K/V are read
    local_positions: np.ndarray
    tokens: np.ndarray  # tokens of all new rows (replay rows included)
    positions: np.ndarray
    parents: np.ndarray
    replay: int = 0  # how many leading new rows are replay rows
    local_lower: int = 0  # bounded recovery: local attention never sees positions below this
    consumer_from: int = 0  # compact recovery: consumers skip rows below this position
    earlier: Rows | None = None  # rows computed by an earlier call this round (draft levels)
    earlier_positions: np.ndarray = field(default_factory=lambda: _NO_INTS)
    earlier_parents: np.ndarray = field(default_factory=lambda: _NO_INTS)
    earlier_full: np.ndarray = field(default_factory=lambda: _NO_BOOLS)
    # Names the stored rows: a later item with the same key has the same rows at every
    # position both hold (so a padded copy made earlier can be extended, not redone).
    context_key: Hashable | None = None

    @property
    def encoder_length(self) -> int:
        return len(self.context)


@dataclass
class BatchContext:
    """The stored state a batch attends to, padded once (reused across a round's draft levels)."""

    # (B, 4, C [+ tail], W): planes of encoder K, V and shared K, V of the stored rows; one
    # plane per key or value set, so a padded batch's attention reads contiguous rows.
    globals: np.ndarray
    length: np.ndarray  # (B,) stored rows per item
    local: np.ndarray  # (B, L, 2·depth·W): local K/V of the stored window rows
    local_positions: np.ndarray  # (B, L); padding is far below any window
    lower: np.ndarray  # (B,)
    consumer_from: np.ndarray  # (B,)
    ragged: bool  # some item has fewer stored rows than C (padding must be masked)
    stored: int  # C: rows of `globals` that hold stored context; the rest is scratch tail
    # (B, L + tail, 2·depth·W) when padded: `local` followed by room for a call's own rows,
    # so a chain call appends its window rows in place instead of copying `local`. Slice its
    # columns whenever `local`'s are sliced (a draft reading the target's context does).
    local_room: np.ndarray | None = None
    # (B, C) additive mask of the stored rows (padding masked), made with a padded context
    # from its `length`: the forwards of a round share it.
    stored_bias: np.ndarray | None = None

    @property
    def merged(self) -> bool:
        """A padded (batched) context carries a scratch tail after the stored rows, where a
        call's new rows are written so each attention runs over one key set."""
        return self.globals.shape[0] > 1

    def reserve(self, rows: int) -> None:
        size, count, have, width = self.globals.shape
        if not self.merged or have - self.stored >= rows:
            return
        grown = np.zeros((size, count, self.stored + 2 * rows, width))
        grown[:, :, : self.stored] = self.globals[:, :, : self.stored]
        self.globals = grown
