"""Which fast path computes a batch: each trick is taken where its one check says it applies,
and everything else goes through the tree forward with work buffers and in-place keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...rows import BatchContext, RowBatchItem, Rows
from ..batched import tree_rows
from .buffers import WorkBuffers
from .chain import chain_rows, chain_shape
from .chunks import chunked_rows, long_prefills
from .groups import group_suffixes, length_groups
from .keys import in_place_keys
from .padded import batch_context

if TYPE_CHECKING:
    from ..tinymodel import TinyModel


def compute_rows(
    model: TinyModel, work: WorkBuffers, batch: list[RowBatchItem], context: BatchContext | None
) -> list[Rows]:
    """The new rows of every item: items of very different lengths in groups of their own
    (`length_groups`), unless the caller padded one context for the whole batch."""
    member_groups = length_groups(batch) if context is None else [list(range(len(batch)))]
    if len(member_groups) == 1:
        return _compute_group(model, work, batch, context)
    results: list[Rows | None] = [None] * len(batch)
    for members, suffix in zip(member_groups, group_suffixes(batch, member_groups)):
        with work.in_group(suffix):  # each group pads its contexts in buffers of its own
            outputs = _compute_group(model, work, [batch[i] for i in members], None)
        for i, rows in zip(members, outputs):
            results[i] = rows
    return results  # type: ignore[return-value]


def _compute_group(
    model: TinyModel, work: WorkBuffers, batch: list[RowBatchItem], context: BatchContext | None
) -> list[Rows]:
    shape = chain_shape(batch)
    if shape is not None:
        return chain_rows(model, work, batch, shape, context)
    long = long_prefills(batch) if context is None else []
    if long:
        return _with_chunked(model, work, batch, long)
    if context is None:
        tail = max(len(item.earlier_positions) + len(item.tokens) for item in batch)
        context = batch_context(model, work, batch, tail=tail, local_room=False)
    return tree_rows(model, batch, context, scratch=work.scratch, keys=in_place_keys)


def _with_chunked(
    model: TinyModel, work: WorkBuffers, batch: list[RowBatchItem], long: list[int]
) -> list[Rows]:
    """The `long` items chunk by chunk, the rest of the batch together."""
    results: list[Rows | None] = [None] * len(batch)
    rest = [i for i in range(len(batch)) if i not in long]
    if rest:
        for i, rows in zip(rest, _compute_group(model, work, [batch[i] for i in rest], None)):
            results[i] = rows

    def compute(chunk: list[RowBatchItem]) -> list[Rows]:
        return compute_rows(model, work, chunk, None)

    for i in long:
        results[i] = chunked_rows(batch[i], model.layout, model.window, compute)
    return results  # type: ignore[return-value]
