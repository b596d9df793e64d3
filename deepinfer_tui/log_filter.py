"""Which log events a filtered commit log shows: one request's (with the evictions that
explain its cold restore), one kind's, or both. No Textual: plain data in, indices out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Event = Mapping[str, Any]

# The kinds `k` steps through, in order (then back to all).
LOG_KINDS: tuple[str, ...] = (
    "commit",
    "restore",
    "publish",
    "evict",
    "preempt",
    "rollback",
    "finished",
)


def next_kind(kind: str | None) -> str | None:
    """The kind after `kind` in LOG_KINDS; after the last: None (every kind)."""
    if kind is None:
        return LOG_KINDS[0]
    index = LOG_KINDS.index(kind) + 1 if kind in LOG_KINDS else len(LOG_KINDS)
    return LOG_KINDS[index] if index < len(LOG_KINDS) else None


def explaining_evictions(
    log: Sequence[Event], snapshot: Mapping[str, Any], request_id: str
) -> set[int]:
    """Indices of the evictions before the request's last cold restore that freed blocks a
    request with the same first block of prompt had published: had they stayed cached, the
    restore could have reused them."""
    size = int(snapshot.get("pool", {}).get("block_size", 1))
    heads = {r["id"]: tuple(r.get("prompt", ())[:size]) for r in snapshot.get("requests", [])}
    head = heads.get(request_id)
    cold = [
        index
        for index, event in enumerate(log)
        if event.get("kind") == "restore"
        and event.get("request_id") == request_id
        and event.get("cache") == "cold"
    ]
    if head is None or len(head) < size or not cold:
        return set()
    owner: dict[int, str] = {}  # block id -> the request whose publish put it in the cache
    found: set[int] = set()
    for index, event in enumerate(log[: cold[-1]]):
        kind = event.get("kind")
        if kind == "publish" and event.get("request_id"):
            for block in event.get("blocks", ()):
                owner[block] = event["request_id"]
        elif kind == "evict":
            publishers = {owner.get(block) for block in event.get("blocks", ())}
            if any(heads.get(p) == head for p in publishers if p is not None):
                found.add(index)
    return found
