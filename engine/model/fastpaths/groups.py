"""Length groups: items of very different context lengths computed apart, so short contexts
are not padded to a long one's."""

from __future__ import annotations

import math
from itertools import pairwise

from ...rows import RowBatchItem

# Items of a batch whose context lengths differ this much are computed in separate groups.
GROUP_RATIO = 4
GROUP_ROWS = 512  # no group is cut off below this many rows: padding them costs little


def length_groups(batch: list[RowBatchItem]) -> list[list[int]]:
    """The batch's items in groups of similar context length, each in batch order.

    Padded attention costs every item the longest context in its batch: one 4000-row history
    among 127 short ones made a decode round 10x slower. Sorted by length, the items are cut
    where one is over GROUP_RATIO times the one before and longer than GROUP_ROWS; a batch of
    like lengths stays one group (one forward), as a decode batch usually is."""
    lengths = [item.encoder_length + len(item.tokens) for item in batch]
    if max(lengths) <= max(GROUP_ROWS, GROUP_RATIO * min(lengths)):
        return [list(range(len(batch)))]  # no two of them differ enough: no sort needed
    order = sorted(range(len(batch)), key=lengths.__getitem__)
    bounds = []  # the shortest length of every group after the first
    for before, after in pairwise(order):
        if lengths[after] > max(GROUP_ROWS, GROUP_RATIO * lengths[before]):
            bounds.append(lengths[after])
    if not bounds:
        return [list(range(len(batch)))]
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for index, length in enumerate(lengths):
        groups[sum(length >= bound for bound in bounds)].append(index)
    return groups


def group_suffixes(batch: list[RowBatchItem], groups: list[list[int]]) -> list[str]:
    """Work-buffer names for the groups, stable while groups come and go: the largest group
    keeps the batch's own buffers (a long request joining many short ones moves none of
    theirs), the others are named by their longest context's power of 4 (length groups are
    over 4x apart, so two never share one). Numbered if two would: sharing stays exact (the
    kept-rows records go with the buffer) but the groups would overwrite each other's rows."""
    largest = max(range(len(groups)), key=lambda g: len(groups[g]))
    longest = [max(batch[i].encoder_length + len(batch[i].tokens) for i in g) for g in groups]
    suffixes = [
        "" if number == largest else f" ~{int(math.log(longest[number], 4))}"
        for number in range(len(groups))
    ]
    if len(set(suffixes)) < len(suffixes):
        suffixes = [f" #{number}" if number else "" for number in range(len(groups))]
    return suffixes
