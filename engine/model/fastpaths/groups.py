"""Length groups: items of very different sizes computed apart, so a decode step is not padded
to a prefill chunk's rows, nor a short context to a long one's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from ...rows import RowBatchItem

# Items of a batch whose sizes differ this much are computed in separate groups.
GROUP_RATIO = 4
GROUP_ROWS = 512  # no group is cut off below this context length: padding it costs little
GROUP_NEW_ROWS = 32  # nor below this many new rows,
# and items are cut apart by new rows only when padding them together would attend this many
# (row, key) pairs or more: below it, one more forward costs more than the padding.
GROUP_PADDED_PAIRS = 2**18


def length_groups(batch: list[RowBatchItem]) -> list[list[int]]:
    """The batch's items in groups of like size, each in batch order.

    Padded attention costs every item the most new rows and the longest context in its batch:
    one 4000-row history among 127 short ones made a decode round 10x slower, and two decode
    steps padded to a 200-row prefill chunk's rows (with a 1,600-row context) cost 12x the
    attention they need. Items are cut apart by new rows first, then each part by context
    length: sorted by size, a cut falls where an item is over GROUP_RATIO times the one before
    and above the floor (GROUP_NEW_ROWS, GROUP_ROWS); by new rows only where the padded batch
    is large (GROUP_PADDED_PAIRS). A batch of like items stays one group (one forward), as a
    decode batch usually is."""
    new_rows = [len(item.tokens) for item in batch]
    lengths = [item.encoder_length + len(item.tokens) for item in batch]
    members = list(range(len(batch)))
    padded = len(batch) * max(new_rows) * max(lengths)
    parts = _cut(members, new_rows, GROUP_NEW_ROWS) if padded >= GROUP_PADDED_PAIRS else [members]
    groups = []
    for part in parts:
        groups.extend(_cut(part, lengths, GROUP_ROWS))
    return groups


def _cut(members: list[int], sizes: Sequence[int], floor: int) -> list[list[int]]:
    """`members` in groups of like `sizes` (see `length_groups`), each in batch order."""
    ours = [sizes[i] for i in members]
    if max(ours) <= max(floor, GROUP_RATIO * min(ours)):
        return [members]  # no two of them differ enough: no sort needed
    order = sorted(members, key=sizes.__getitem__)
    bounds = [
        sizes[after]  # the smallest size of every group after the first
        for before, after in pairwise(order)
        if sizes[after] > max(floor, GROUP_RATIO * sizes[before])
    ]
    if not bounds:
        return [members]
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for index in members:
        groups[sum(sizes[index] >= bound for bound in bounds)].append(index)
    return groups


def group_suffixes(batch: list[RowBatchItem], groups: list[list[int]]) -> list[str]:
    """Work-buffer names for the groups, stable while groups come and go: the largest group
    keeps the batch's own buffers (a long request joining many short ones moves none of
    theirs), the others are named by the powers of 4 of their longest context and most new
    rows (groups are over 4x apart in one of them, so two rarely share a name). Numbered if two
    would: sharing stays exact (the kept-rows records go with the buffer) but the groups would
    overwrite each other's rows."""
    largest = max(range(len(groups)), key=lambda g: len(groups[g]))

    def name(group: list[int]) -> str:
        longest = max(batch[i].encoder_length + len(batch[i].tokens) for i in group)
        rows = max(len(batch[i].tokens) for i in group)
        return f" ~{int(math.log(longest, 4))}.{int(math.log(max(rows, 1), 4))}"

    suffixes = ["" if number == largest else name(groups[number]) for number in range(len(groups))]
    if len(set(suffixes)) < len(suffixes):
        suffixes = [f" #{number}" if number else "" for number in range(len(groups))]
    return suffixes
