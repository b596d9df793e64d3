"""The commit: accept the longest verified path, make its rows committed, drop the rest.

Acceptance itself (which path) is `speculation.acceptance.accept`; this module applies it to
the request: its tokens, cursors, rows, blocks and counters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .blocks import BlockManager
from .model import is_integer
from .request import EventLog, Request
from .runner import Verified
from .speculation.acceptance import accept
from .speculation.drafter import Drafter
from .speculation.tree import ROOT


def commit(
    verified: Verified,
    blocks: BlockManager,
    drafter: Drafter,
    counters: dict[str, int],
    log: EventLog,
    cache_key: Callable[[], str],
) -> tuple[list[int], bool]:
    """Commit the accepted tokens; record the round (`last_commit`, `verify` and `commit`
    events). Returns the new tokens and whether the request may generate no more."""
    request, tree, tick = verified.request, verified.tree, log.tick
    n = len(request.tokens)
    consumer = request.cursors["target"][1]  # admitted requests always have cursors
    verified_nodes = len(verified.selected)
    decision = accept(tree, verified.selected, verified.choice, request.eos_id)
    _move_accepted_rows(blocks, verified, decision.path)
    new_tokens = [tree.tokens[i] for i in decision.path]
    if decision.next_token is not None:
        new_tokens.append(decision.next_token)
    new_tokens = new_tokens[: (remaining := request.remaining)]  # before this round's tokens
    request.tokens.extend(new_tokens)
    # Every row before the new pending token is computed; a zero-token request commits
    # nothing, and every row of its prompt (the last one too) is computed.
    cursor = len(request.tokens) - 1 if new_tokens else n
    request.cursors["target"] = [cursor, cursor]
    drafter.keep(verified.plan.proposal, decision.path, cursor)
    accepted, rolled_back = len(decision.path), verified_nodes - len(decision.path)
    _count(counters, verified, accepted, len(new_tokens))
    request.accepted += accepted
    request.confidences = [tree.path_probs[i] for i in verified.selected]
    tree.judge(verified.selected, decision.path, verified.choice, verified.checks)
    tree_view = tree.to_dict()
    request.tree = {**tree_view, "round": tick, "base_position": n - 1}
    # Rows beyond the new cursor were speculative: their blocks go back to the pool.
    dropped = blocks.drop_after(request, cursor)
    blocks.seal(request, consumer, cursor)
    blocks.hash_full_blocks(request, cursor, cache_key)
    blocks.cache_full_blocks(request)
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
    _emit(log, verified, consumer, n, tree_view["nodes"], request.last_commit)
    return new_tokens, remaining <= len(new_tokens)


def _emit(log: EventLog, verified: Verified, start: int, n: int, nodes: list, commit: dict) -> None:
    """The round's events for one request: the end of its prefill (if it had one), the
    verification and the commit."""
    request_id = verified.request.request_id
    if len(verified.item.tokens) - commit["verified"] > 1:  # this round ended a prefill
        log.emit("prefill", request_id, start=start, stop=n, total=n)
    log.emit("verify", request_id, nodes=nodes)
    log.emit(
        "commit",
        request_id,
        tokens=commit["tokens"],
        accepted=commit["accepted"],
        verified=commit["verified"],
        outcome=commit["outcome"],
        rolled_back_positions=commit["rolled_back_positions"],
        freed_blocks=commit["dropped_blocks"],
    )


def _move_accepted_rows(blocks: BlockManager, verified: Verified, path: list[int]) -> None:
    """Move the accepted path's rows next to the committed prefix (a chain is already there)."""
    rows, slots = verified.rows, verified.slots
    for offset, node in enumerate(path, start=1):
        source_row, target_row = rows[node], rows[ROOT] + offset
        if source_row != target_row:
            blocks.move_row("target", slots[source_row], slots[target_row])


def commit_chunk(
    verified: Verified, blocks: BlockManager, counters: dict[str, int], log: EventLog,
    cache_key: Callable[[], str],
) -> None:  # fmt: skip
    """A prefill chunk that stops before the pending position: its rows become committed
    (the request's cursor moves on); no token, no draft."""
    request = verified.request
    encoder, consumer = request.cursors["target"]
    stop = consumer + len(verified.out)
    request.cursors["target"] = [max(encoder, stop), stop]
    blocks.seal(request, consumer, stop)
    blocks.hash_full_blocks(request, stop, cache_key)
    blocks.cache_full_blocks(request)
    _count_rows(counters, verified)
    log.emit("prefill", request.request_id, start=consumer, stop=stop, total=len(request.tokens))


def _count_rows(counters: dict[str, int], verified: Verified) -> None:
    request, item = verified.request, verified.item
    counters["encoder_rows"] += len(item.tokens) - item.replay
    consumer_rows = (
        len(item.tokens)
        if not request.consumer_from
        else int(np.sum(item.positions >= request.consumer_from))
    )
    counters["consumer_rows"] += consumer_rows * verified.depth


def _count(counters: dict[str, int], verified: Verified, accepted: int, committed: int) -> None:
    _count_rows(counters, verified)
    counters["accepted"] += accepted
    counters["verified"] += len(verified.selected)
    counters["committed_tokens"] += committed
    counters["rolled_back_positions"] += len(verified.selected) - accepted


def rollback_count(request: Request, tokens: object) -> int:
    """How many tokens a rollback of `tokens` removes (clamped to those generated); a
    ValueError if `tokens` is not a positive integer or the request cannot roll back."""
    if not is_integer(tokens) or tokens < 1:  # type: ignore[operator]
        raise ValueError(f"tokens must be a positive integer, got {tokens!r}")
    if request.finish_reason in ("cancelled", "error"):
        raise ValueError(
            f"request {request.request_id!r} finished as {request.finish_reason}; it cannot "
            "roll back"
        )
    return min(int(tokens), request.generated)  # type: ignore[call-overload]


def roll_back(
    request: Request, count: int, blocks: BlockManager, counters: dict[str, int]
) -> list[int]:
    """Undo a request's last `count` committed tokens: its rows and blocks return to the
    shorter prefix; returns the blocks freed."""
    # A new list: undo checkpoints share the old one (see Checkpoint.lengths).
    request.tokens = request.tokens[: len(request.tokens) - count]
    # "committed" counts the tokens requests hold now (the header shows it): these left.
    counters["committed_tokens"] -= count
    freed = blocks.truncate(request, len(request.tokens) - 1)
    request.tree = None
    request.last_commit = None
    return freed
