"""What a drafter hands the round: per request, a tree of guesses after the pending token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..request import Request
from ..rows import BatchContext, RowBatchItem, Rows
from .tree import DraftTree

if TYPE_CHECKING:  # config imports speculation: a runtime import would be circular
    from ..config import EngineConfig


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
    # A sampling draft's distribution q of each node's token (rejection acceptance reads it).
    draft_probs: dict[int, np.ndarray] = field(default_factory=dict)

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


def rooted(batch: list[Request]) -> list[Proposal]:
    return [Proposal(r, DraftTree.rooted(r.tokens[-1])) for r in batch]


def round_caps(config: EngineConfig, requests: int) -> tuple[int, int] | None:
    """(deepest node, nodes per tree) a round of `requests` may draft; None: no position is
    left to verify a draft with. Grow no more than the round can verify: a request's fair share
    of the extra positions bounds its depth, twice that its nodes (a 64-request round drafts
    one level, not four)."""
    if config.max_batch_tokens <= requests:
        return None
    share = max(1, config.max_batch_tokens // requests - 1)
    return min(config.draft_width, share), min(config.max_draft_nodes, 2 * share)


def drafts(request: Request, depth_cap: int) -> bool:
    """Whether the request gets a tree this round. A round that still computes the prompt (or
    replays it) verifies only its main position: drafting then would repeat the prefill in
    the draft model for little gain (and a prefill chunk commits no token to hang it on)."""
    pending = len(request.tokens) - 1
    return min(depth_cap, request.remaining - 1) > 0 and request.cursor("target") == [
        pending,
        pending,
    ]
