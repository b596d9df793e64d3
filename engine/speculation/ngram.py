"""Prompt-lookup drafting: the n-gram drafter, as vLLM's n-gram proposer drafts.

The context's last n tokens (the longest n in [min_n, max_n] that occurred earlier) are looked
up in the context itself; the tokens that followed their earliest occurrence are the draft.
No model runs: a proposal is a point mass (q = 1), so under rejection acceptance each node is
kept with probability p(x), and under greedy or coupled acceptance the tokens stay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..model import is_integer
from ..request import Request
from .proposal import DraftRound, Proposal, drafts, rooted, round_caps
from .tree import ROOT

if TYPE_CHECKING:  # config imports speculation: a runtime import would be circular
    from ..config import EngineConfig


class NgramDrafter:
    """Proposes the tokens that followed the earliest earlier occurrence of the context's
    longest suffix of `min_n` to `max_n` tokens. Use as `Engine(target, NgramDrafter())`."""

    def __init__(self, min_n: int = 2, max_n: int = 3) -> None:
        for name, value in (("min_n", min_n), ("max_n", max_n)):
            if not is_integer(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if max_n < min_n:
            raise ValueError(f"max_n ({max_n}) must be at least min_n ({min_n})")
        self.min_n, self.max_n = int(min_n), int(max_n)

    def __repr__(self) -> str:
        return f"NgramDrafter(min_n={self.min_n}, max_n={self.max_n})"

    def to_dict(self) -> dict[str, object]:
        return {"kind": "ngram", "min_n": self.min_n, "max_n": self.max_n}

    def match(self, tokens: Sequence[int]) -> tuple[int, int] | None:
        """(start, length) of the earliest earlier occurrence of the longest suffix of
        `tokens` with a length in [min_n, max_n]; None when no such suffix occurred before."""
        context = np.asarray(tokens, dtype=np.int64)
        for n in range(min(self.max_n, len(context) - 1), self.min_n - 1, -1):
            # Windows starting before the suffix itself (they may overlap it).
            windows = np.lib.stride_tricks.sliding_window_view(context[:-1], n)
            hits = np.flatnonzero((windows == context[-n:]).all(axis=1))
            if len(hits):
                return int(hits[0]), n
        return None

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens that followed the match (empty when nothing matched)."""
        return _followers(tokens, self.match(tokens), k)


def _followers(tokens: Sequence[int], found: tuple[int, int] | None, k: int) -> list[int]:
    if found is None or k <= 0:
        return []
    start, n = found
    return [int(t) for t in tokens[start + n : start + n + k]]


class NgramRound:
    """The engine's side of an NgramDrafter: a chain per decoding request, within the round's
    share of the verification budget (as a model draft is capped)."""

    def __init__(self, ngram: NgramDrafter, config: EngineConfig) -> None:
        self.ngram = ngram
        self.config = config

    def propose(self, batch: list[Request], fail: Callable[[Request, str], None]) -> DraftRound:
        proposals = rooted(batch)
        caps = round_caps(self.config, len(proposals))
        if caps is None:
            return DraftRound(proposals)
        depth_cap, node_cap = caps
        grown = []
        for proposal in proposals:
            request = proposal.request
            if not drafts(request, depth_cap):
                continue
            k = min(depth_cap, node_cap, request.remaining - 1)
            found = self.ngram.match(request.tokens)
            chain = _followers(request.tokens, found, k)
            if found is None or not chain:
                continue
            node = ROOT
            for token in chain:
                node = proposal.tree.add(node, token, 1.0)
            proposal.tree.ngram = {"start": found[0], "length": found[1]}
            grown.append(proposal)
        return DraftRound(proposals, grown=grown)

    def keep(self, proposal: Proposal, path: list[int], cursor: int) -> None:
        pass  # nothing is stored for an n-gram draft
