"""Tree geometry for the batched forward: ragged scatter indices and ancestor masks."""

from __future__ import annotations

import numpy as np


def ragged_index(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item and row index of every row of items holding `counts` rows each, items in order
    (flat rows -> (item, row) of a padded array)."""
    items = np.repeat(np.arange(len(counts)), counts)
    return items, np.arange(len(items)) - (np.cumsum(counts) - counts)[items]


def ancestor_mask(
    parents: np.ndarray, counts: np.ndarray, earlier: np.ndarray, queries: int
) -> np.ndarray:
    """(B, Q, E): extra row j is query i itself or one of its ancestors, where query i is
    extra row `earlier[b] + i` and `parents` (B, E) index extra rows (-1: the stored rows)."""
    rows = parents.shape[1]
    query_rows = np.minimum(earlier[:, None] + np.arange(queries)[None, :], rows - 1)
    if all_chains(parents, counts):  # the common case: no branching anywhere
        return np.arange(rows)[None, None, :] <= query_rows[:, :, None]
    return np.take_along_axis(ancestors(parents, counts), query_rows[:, :, None], axis=1)


def all_chains(parents: np.ndarray, counts: np.ndarray) -> bool:
    """Every item's rows form one chain: row i's parent is row i - 1 (the first hangs off
    the stored context)."""
    index = np.arange(parents.shape[1])
    chained = (parents == index - 1) | (index >= counts[:, None])
    return bool(chained.all())


def ancestors(parents: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """a[b, i, j]: row j is row i itself or one of its ancestors.

    The leading rows whose parents are -1, 0, 1, ... form a chain (lower-triangular block,
    built without a loop); the remaining tree rows walk up to the chain, one level per pass.
    """
    size, rows = parents.shape
    index = np.arange(rows)
    chain_like = parents == (index - 1)[None, :]
    chain = np.where(chain_like.all(axis=1), rows, np.argmin(chain_like, axis=1))
    chain = np.minimum(chain, counts)
    row = index[None, :, None]
    col = index[None, None, :]
    in_chain = row < chain[:, None, None]
    result = in_chain & (col <= row) & (col < chain[:, None, None])
    tree = (~in_chain[:, :, 0]) & (index[None, :] < counts[:, None])
    if tree.any():
        result |= tree[:, :, None] & (col == row)
        current = np.where(tree, parents, -1)
        batch = np.arange(size)[:, None].repeat(rows, axis=1)
        for _ in range(rows):
            climbing = current >= chain[:, None]
            if not climbing.any():
                break
            b, i = batch[climbing], np.nonzero(climbing)[1]
            result[b, i, current[climbing]] = True
            current = np.where(
                climbing, np.take_along_axis(parents, np.maximum(current, 0), 1), current
            )
        landed = tree & (current >= 0)
        result |= landed[:, :, None] & (col <= current[:, :, None])
    return result
