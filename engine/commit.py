"""The commit: accept the longest verified path, make its rows committed, drop the rest.

Acceptance itself (which path) is `speculation.acceptance.accept`; this module applies it to
the request: its tokens, cursors, rows, blocks and counters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blocks import BlockManager
from .runner import Verified
from .speculation.acceptance import accept
from .speculation.drafter import Drafter
from .speculation.tree import ROOT


def commit(
    verified: Verified,
    *,
    blocks: BlockManager,
    drafter: Drafter,
    counters: dict[str, int],
    depth: int,
    tick: int,
    cache_key: str,
) -> dict[str, Any]:
    """Commit the accepted tokens; returns the request's `last_commit` (also set on it)."""
    request, tree, slots, rows = verified.request, verified.tree, verified.slots, verified.rows
    n = len(request.tokens)
    consumer = request.cursors["target"][1]  # admitted requests always have cursors
    verified_nodes = len(verified.selected)
    decision = accept(tree, verified.selected, verified.argmax, request.eos_id)
    # Move the accepted path's rows next to the committed prefix (a chain is already there).
    for offset, node in enumerate(decision.path, start=1):
        source_row, target_row = rows[node], rows[ROOT] + offset
        if source_row != target_row:
            blocks.move_row("target", slots[source_row], slots[target_row])
    new_tokens = [tree.tokens[i] for i in decision.path]
    if decision.next_token is not None:
        new_tokens.append(decision.next_token)
    new_tokens = new_tokens[: request.remaining]  # the remaining before this round's tokens
    request.tokens.extend(new_tokens)
    cursor = len(request.tokens) - 1  # every row before the new pending token is computed
    request.cursors["target"] = [cursor, cursor]
    drafter.keep(verified.plan.proposal, decision.path, cursor)
    accepted = len(decision.path)
    rolled_back = verified_nodes - accepted
    _count(counters, verified, depth, accepted, len(new_tokens))
    request.accepted += accepted
    request.confidences = [tree.path_probs[i] for i in verified.selected]
    tree.judge(verified.selected, decision.path, verified.argmax)
    request.tree = {**tree.to_dict(), "round": tick, "base_position": n - 1}
    # Rows beyond the new cursor were speculative: their blocks go back to the pool.
    dropped = blocks.drop_after(request, cursor)
    blocks.seal(request, consumer, cursor)
    blocks.hash_full_blocks(request, cursor, cache_key)
    request.last_commit = {
        "round": tick,
        "tokens": new_tokens,
        "accepted": accepted,
        "verified": verified_nodes,
        "outcome": decision.kind,
        "rolled_back_positions": rolled_back,
        "dropped_blocks": dropped,
        "speculative_positions": list(range(n, n + verified_nodes)),
    }
    return request.last_commit


def _count(
    counters: dict[str, int], verified: Verified, depth: int, accepted: int, committed: int
) -> None:
    request, item = verified.request, verified.item
    counters["encoder_rows"] += len(item.tokens) - item.replay
    consumer_rows = (
        len(item.tokens)
        if not request.consumer_from
        else int(np.sum(item.positions >= request.consumer_from))
    )
    counters["consumer_rows"] += consumer_rows * depth
    counters["accepted"] += accepted
    counters["verified"] += len(verified.selected)
    counters["committed_tokens"] += committed
    counters["rolled_back_positions"] += len(verified.selected) - accepted
