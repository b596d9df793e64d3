"""Greedy tree acceptance: walk from the root along the target's argmax."""

from __future__ import annotations

from dataclasses import dataclass

from .tree import ROOT, DraftTree


@dataclass(frozen=True)
class Acceptance:
    path: list[int]  # accepted tree nodes after the root, in order
    next_token: int | None  # replacement or bonus; None when EOS ended the path
    kind: str  # "bonus" | "replacement" | "eos"


def accept(
    tree: DraftTree, verified: list[int], argmax: dict[int, int], eos_id: int | None
) -> Acceptance:
    """Walk from the root taking the verified child equal to the target's argmax."""
    node = ROOT
    path: list[int] = []
    children_of: dict[int, list[int]] = {}
    for child in verified:
        children_of.setdefault(tree.parents[child], []).append(child)
    while True:
        wanted = argmax[node]
        children = children_of.get(node, [])
        for match in children:
            if tree.tokens[match] == wanted:
                break
        else:
            kind = "replacement" if children else "bonus"
            return Acceptance(path, wanted, kind)
        path.append(match)
        node = match
        if eos_id is not None and tree.tokens[match] == eos_id:
            return Acceptance(path, None, "eos")
