"""Bookkeeping checks of each cache policy, on public data (a snapshot) only.

`check_block_invariants` (helpers) runs them after its own checks; `cache_holdings` tells it
what the cache holds, whatever the policy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

FREE = ("free", "dropped")


def radix_nodes(tree: dict[str, Any]) -> Iterator[tuple[dict[str, Any], list[int]]]:
    """Every node under the root, with the tokens from the root to its end."""
    stack = [(child, list(child["tokens"])) for child in tree["children"]]
    while stack:
        node, path = stack.pop()
        yield node, path
        stack.extend((child, path + child["tokens"]) for child in node["children"])


def cache_holdings(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """What the cache holds a reference to: ttl entries as they are; a radix node as its
    span and blocks (a span starts at a block boundary, so offsets in it are the block's)."""
    cache = snapshot["cache"]
    if isinstance(cache, list):
        return cache
    return [{"tokens": n["tokens"], "blocks": n["blocks"]} for n, _ in radix_nodes(cache["tree"])]


def check_cache_policy(snapshot: dict[str, Any]) -> None:
    policy = snapshot["config"]["cache_policy"]
    if policy == "blocks":
        check_free_queue(snapshot)
    elif policy == "radix":
        check_radix_tree(snapshot)
    else:
        assert isinstance(snapshot["cache"], list) and "free_queue" not in snapshot["pool"]


def check_free_queue(snapshot: dict[str, Any]) -> None:
    """A block is in the free queue iff nobody holds it and the undo history does not keep
    it; the hash map and the blocks' hashes agree; a full block is cached at once."""
    pool, size = snapshot["pool"], snapshot["pool"]["block_size"]
    queue = pool["free_queue"]
    assert len(queue) == len(set(queue)), f"a block queued twice: {queue}"
    free = {block["id"] for block in pool["blocks"] if block["state"] in FREE}
    assert set(queue) == free, (queue, sorted(free))
    by_id = {block["id"]: block for block in pool["blocks"]}
    cached = {(entry["block"], entry["hash"]) for entry in pool["cached"]}
    assert len(cached) == len(pool["cached"]) == len({b for b, _ in cached}), pool["cached"]
    for block, digest in cached:
        assert digest is not None and by_id[block]["hash"] == digest, (block, by_id[block])
    assert snapshot["cache"] == [] and snapshot["metrics"]["blocks"]["cached"] == 0
    if "draft" in snapshot["models"]:
        return  # a draft's rows may lag: its blocks are cached when both models filled them
    for view in snapshot["requests"]:
        if view["status"] == "finished":
            continue
        for block in view["blocks"]:
            if block["hash"] is not None and None not in block["slots"]:
                assert (block["id"], block["hash"]) in cached, (view["id"], block)
    assert all(b["id"] < len(by_id) for b in pool["blocks"]) and size > 0


def check_radix_tree(snapshot: dict[str, Any]) -> None:
    """Spans are whole blocks, children differ in their first block, a parent was accessed
    no earlier than its children, and a node's lock count is the number of requests whose
    locked prefix runs through it (each an unfinished request holding blocks)."""
    cache, size = snapshot["cache"], snapshot["pool"]["block_size"]
    tree = cache["tree"]
    assert tree["tokens"] == [] and tree["blocks"] == [] and tree["lock"] == 0
    views = {view["id"]: view for view in snapshot["requests"]}
    for request_id, positions in cache["locks"].items():
        view = views[request_id]
        assert view["status"] != "finished" and view["blocks"], (request_id, view["status"])
        assert positions % size == 0 and positions > 0
    parents = [(tree, []), *radix_nodes(tree)]
    for parent, path in parents:
        firsts = Counter(tuple(child["tokens"][:size]) for child in parent["children"])
        assert all(count == 1 for count in firsts.values()), parent
        for child in parent["children"]:
            assert child["tokens"] and len(child["tokens"]) == len(child["blocks"]) * size
            if parent is not tree:
                assert parent["last_access"] >= child["last_access"], (parent, child)
        if parent is tree:
            continue
        lockers = [
            request_id
            for request_id, positions in cache["locks"].items()
            if positions >= len(path)
            and (views[request_id]["prompt"] + views[request_id]["generated"])[: len(path)] == path
        ]
        assert parent["lock"] == len(lockers), (path, parent["lock"], lockers)
