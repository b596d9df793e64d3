"""What a drafter hands the round: per request, a tree of guesses after the pending token."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..request import Request
from ..rows import BatchContext, RowBatchItem, Rows
from .tree import DraftTree


@dataclass(eq=False)
class Proposal:
    """One request's draft tree this round, with the draft rows that grew it."""

    request: Request
    tree: DraftTree
    rows: dict[int, int] = field(default_factory=dict)  # tree node -> draft row index
    item: RowBatchItem | None = None  # the newest level's draft input
    # Each draft level's rows, joined only when read (the last level's usually never are).
    parts: list[Rows] = field(default_factory=list)
    frontier: list[int] = field(default_factory=list)  # newest nodes, to expand next
    replay: int = 0  # leading draft rows that were consumer-only replays
    base: RowBatchItem | None = None  # the target's catch-up rows, when built while drafting

    @property
    def out(self) -> Rows | None:
        """Every draft row computed this round, in order (None before the first level)."""
        parts = self.parts
        if len(parts) > 1:
            parts[:] = [Rows.concat(parts)]
        return parts[0] if parts else None


@dataclass(eq=False)
class DraftRound:
    """The round's proposals (requests whose draft failed are left out), and the target's
    stored context when the drafter padded it for exactly the requests in `padded_for`."""

    proposals: list[Proposal]
    grown: list[Proposal] = field(default_factory=list)  # proposals a drafter grew
    context: BatchContext | None = None
    padded_for: list[Proposal] = field(default_factory=list)

    def context_for(self, proposals: list[Proposal]) -> BatchContext | None:
        """The padded context, if `proposals` are exactly the requests it was padded for."""
        same = len(proposals) == len(self.padded_for) and all(
            a is b for a, b in zip(proposals, self.padded_for)
        )
        return self.context if same else None
