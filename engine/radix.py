"""The "radix" cache policy: SGLang's RadixAttention over the paged pool.

A radix tree over token sequences: each node holds a span of tokens, the blocks holding their
rows (the tree counts as one holder of each), a lock count (the requests now using it) and its
last access. Spans are whole blocks, since KV is paged: a prefix is matched, split and stored
block by block, and a partial last block is never cached. Last access is a logical counter
(one tick per match or insert), not the clock: the order is exact even when time stands still.

A lookup walks down the tree while the prompt's next block matches a child's; where the match
ends inside a node, the node is split there. A request that hits locks the nodes it matched;
its prefix is inserted once its prompt is stored and again when it finishes (its lock moving
to the longer path), and its locks go when it gives back its blocks. Eviction frees the least
recently used unlocked leaf first; a parent whose last child went becomes a leaf in its turn.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .blocks import stored_positions
from .cache import Lookup, counted
from .request import Request

if TYPE_CHECKING:
    from .prefixes import Prefixes


@dataclass(eq=False)
class Node:
    tokens: tuple[int, ...]  # its span: whole blocks
    blocks: list[int]
    parent: Node | None
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)  # by first block
    lock: int = 0
    last_access: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "blocks": list(self.blocks),
            "children": [child.to_dict() for child in self.children.values()],
            "lock": self.lock,
            "last_access": self.last_access,
        }


def _copy(node: Node, parent: Node | None) -> Node:
    other = Node(node.tokens, list(node.blocks), parent, {}, node.lock, node.last_access)
    other.children = {key: _copy(child, other) for key, child in node.children.items()}
    return other


class RadixTree:
    def __init__(self, block_size: int) -> None:
        self.size = block_size
        self.key: str | None = None  # the models' cache key its rows belong to
        self.root = Node((), [], None)
        self.ticks = 0  # the logical clock of last accesses
        self.locks: dict[str, tuple[int, ...]] = {}  # request id -> the prefix it locks
        # Requests locking a hit they have computed nothing after yet (admitted this round).
        self.fresh: set[str] = set()

    def copy(self) -> RadixTree:
        other = RadixTree(self.size)
        other.key, other.ticks, other.locks = self.key, self.ticks, dict(self.locks)
        other.fresh = set(self.fresh)
        other.root = _copy(self.root, None)
        return other

    def nodes(self) -> Iterator[Node]:
        """Every node but the root."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def match(self, tokens: tuple[int, ...]) -> tuple[Node, int, list[int]]:
        """The deepest node matching `tokens` block by block (splitting the node the match
        ends inside), the positions matched and their blocks; the path is touched."""
        size, node, matched, blocks = self.size, self.root, 0, []
        self.ticks += 1
        while matched + size <= len(tokens):
            child = node.children.get(tokens[matched : matched + size])
            if child is None:
                break
            common = _common_blocks(child.tokens, tokens[matched:], size)
            if common < len(child.blocks):
                child = self._split(child, common)
            child.last_access = self.ticks
            blocks.extend(child.blocks)
            matched += len(child.tokens)
            node = child
        return node, matched, blocks

    def matched_length(self, tokens: tuple[int, ...]) -> int:
        """The positions `match` would match, without splitting or touching anything."""
        size, node, matched = self.size, self.root, 0
        while matched + size <= len(tokens):
            child = node.children.get(tokens[matched : matched + size])
            if child is None:
                break
            common = _common_blocks(child.tokens, tokens[matched:], size)
            matched += common * size
            if common < len(child.blocks):
                break
            node = child
        return matched

    def _split(self, child: Node, count: int) -> Node:
        """Cut `child` after its first `count` blocks; returns the new upper part."""
        assert child.parent is not None
        cut = count * self.size
        upper = Node(child.tokens[:cut], child.blocks[:count], child.parent, {}, child.lock)
        upper.last_access = child.last_access
        child.tokens, child.blocks, child.parent = child.tokens[cut:], child.blocks[count:], upper
        upper.children[child.tokens[: self.size]] = child
        upper.parent.children[upper.tokens[: self.size]] = upper  # in its place
        return upper

    def insert(self, tokens: tuple[int, ...], blocks: list[int]) -> list[int]:
        """Store the whole-block prefix `tokens` (rows in `blocks`); returns the blocks the
        tree newly holds (positions it had already keep their own)."""
        node, matched, _ = self.match(tokens)
        if matched == len(tokens):
            return []
        span = tokens[matched:]
        leaf = Node(span, list(blocks[matched // self.size :]), node, {}, 0, self.ticks)
        node.children[span[: self.size]] = leaf
        return leaf.blocks

    def path(self, tokens: tuple[int, ...]) -> Iterator[Node]:
        """The nodes spelling `tokens`, which ends at a node's end."""
        node, walked = self.root, 0
        while walked < len(tokens):
            node = node.children[tokens[walked : walked + self.size]]
            walked += len(node.tokens)
            yield node

    def lock(self, request_id: str, tokens: tuple[int, ...], *, fresh: bool = False) -> None:
        self.unlock(request_id)
        if tokens:
            self.locks[request_id] = tokens
            if fresh:
                self.fresh.add(request_id)
        for node in self.path(tokens):
            node.lock += 1

    def shorten(self, request_id: str, positions: int) -> None:
        """The request keeps only its rows before `positions`: it locks the nodes ending
        there or before."""
        locked = self.locks.get(request_id, ())
        end = 0
        for node in self.path(locked):
            if end + len(node.tokens) > positions:
                break
            end += len(node.tokens)
        if end < len(locked):
            self.lock(request_id, locked[:end], fresh=request_id in self.fresh)

    def unlock(self, request_id: str) -> None:
        self.fresh.discard(request_id)
        for node in self.path(self.locks.pop(request_id, ())):
            node.lock -= 1

    def tokens_to(self, node: Node) -> tuple[int, ...]:
        """The tokens from the root to the end of `node`."""
        spans = []
        while node.parent is not None:
            spans.append(node.tokens)
            node = node.parent
        return tuple(token for span in reversed(spans) for token in span)

    def remove(self, leaf: Node) -> None:
        assert leaf.parent is not None and not leaf.children and leaf.lock == 0
        del leaf.parent.children[leaf.tokens[: self.size]]


def _common_blocks(span: tuple[int, ...], tokens: tuple[int, ...], size: int) -> int:
    """Leading whole blocks `span` and `tokens` share."""
    count, limit = 0, min(len(span), len(tokens)) // size
    while (
        count < limit
        and span[count * size : (count + 1) * size] == tokens[count * size : (count + 1) * size]
    ):
        count += 1
    return count


class RadixPolicy:
    def __init__(self, door: Prefixes) -> None:
        self.door = door
        door.blocks.on_release_all = self.released
        door.blocks.on_full = self.chunk_stored
        door.blocks.on_truncate = lambda request, cursor: self.tree.shorten(
            request.request_id, cursor
        )

    @property
    def tree(self) -> RadixTree:
        return self.door.cache  # type: ignore[return-value]

    def empty(self) -> RadixTree:
        return RadixTree(self.door.config.block_size)

    def lookup(self, tokens: tuple[int, ...], now: float) -> Lookup:
        tree, size = self.tree, self.door.config.block_size
        if tree.key != self.door.key():
            return Lookup("cold", 0, None, "the radix tree holds nothing of these models")
        _, matched, blocks = tree.match(tokens[: len(tokens) // size * size])
        if not matched:
            return Lookup("cold", 0, None, "no whole block of the prompt is in the radix tree")
        reason = f"radix tree match over {counted(len(blocks), 'block')}: " + counted(
            matched, "position"
        )
        return Lookup("hot", matched, None, reason, tuple(blocks))

    def cached_length(self, tokens: tuple[int, ...], now: float) -> int:
        if self.tree.key != self.door.key():
            return 0
        return self.tree.matched_length(tokens[: len(tokens) // self.tree.size * self.tree.size])

    def attached(self, request: Request, found: Lookup) -> None:
        self.tree.lock(request.request_id, tuple(request.tokens[: found.reused]), fresh=True)

    def released(self, request: Request) -> None:
        self.tree.unlock(request.request_id)

    def chunk_stored(self, request: Request) -> None:
        """A prefill chunk (rows stored short of the pending position) is inserted as it
        completes; after the prompt, its prefix waits for the engine's publish."""
        if stored_positions(request) < len(request.tokens) - 1:
            self.publish(request, 0.0)

    def publish(self, request: Request, now: float) -> None:
        """Insert the request's whole stored blocks; it now locks that longer path."""
        door, tree = self.door, self.tree
        full = stored_positions(request) // door.config.block_size
        if full == 0:
            return
        if tree.key != door.key():
            self.drop_other_models()
            tree.key = door.key()
        tokens = tuple(request.tokens[: full * door.config.block_size])
        held = tree.insert(tokens, request.table[:full])
        door.blocks.hold(held)
        tree.lock(request.request_id, tokens)
        if held:
            door.log.emit("insert", request.request_id, positions=len(tokens), blocks=held)

    def expire(self, now: float) -> None:
        pass  # no lifetimes: only pool pressure evicts

    def evict_for(self, deficit: int) -> int:
        """Least recently used unlocked leaves first; a parent left childless joins them.
        Then, if that is not enough, leaves locked only by requests admitted this round that
        computed nothing yet: the scheduler preempts those for space next, and their hit
        would keep the blocks from going back (each lock shrinks to what is left)."""
        deficit = self._evict(deficit, take_hits=False)
        return self._evict(deficit, take_hits=True) if deficit > 0 else deficit

    def _lockers(self, node: Node, take_hits: bool) -> list[str] | None:
        """Who must let go of the leaf `node` before it is evicted (None: it stays)."""
        if node.children or node is self.tree.root:
            return None
        if node.lock == 0:
            return []
        if not take_hits:
            return None
        tree = self.tree
        path = tree.tokens_to(node)
        lockers = [r for r in sorted(tree.fresh) if tree.locks[r][: len(path)] == path]
        return lockers if len(lockers) == node.lock else None

    def _evict(self, deficit: int, *, take_hits: bool) -> int:
        tree, blocks, order = self.tree, self.door.blocks, itertools.count()
        # (last access, a tie-break that never compares nodes, the leaf)
        heap = [
            (n.last_access, next(order), n)
            for n in tree.nodes()
            if self._lockers(n, take_hits) is not None
        ]
        heapq.heapify(heap)
        while deficit > 0 and heap:
            _, _, leaf = heapq.heappop(heap)
            start = len(tree.tokens_to(leaf)) - len(leaf.tokens)
            for request_id in self._lockers(leaf, take_hits) or []:
                tree.shorten(request_id, start)
            deficit -= blocks.only_holder(leaf.blocks)
            self.drop(leaf, "evicted for space")
            parent = leaf.parent
            if parent is not None and self._lockers(parent, take_hits) is not None:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return deficit

    def drop(self, node: Node, why: str) -> None:
        self.tree.remove(node)
        self.door.blocks.release(node.blocks)
        self.door.counters["evictions"] += 1
        self.door.log.emit(
            "evict", None, positions=len(node.tokens), blocks=list(node.blocks), reason=why
        )

    def drop_other_models(self) -> None:
        tree = self.tree
        if tree.key in (None, self.door.key()):
            return
        for node in list(tree.nodes()):
            self.door.blocks.release(node.blocks)
            self.door.counters["evictions"] += 1
            self.door.log.emit(
                "evict",
                None,
                positions=len(node.tokens),
                blocks=list(node.blocks),
                reason="model changed",
            )
        # Requests of the old models have failed (their locks went with their blocks).
        tree.root, tree.key, tree.locks, tree.fresh = RadixTree(tree.size).root, None, {}, set()

    def held_blocks(self) -> set[int]:
        return {block for node in self.tree.nodes() for block in node.blocks}

    def view(self, now: float) -> dict[str, Any]:
        tree = self.tree
        locks = {request_id: len(tokens) for request_id, tokens in tree.locks.items()}
        return {"policy": "radix", "tree": tree.root.to_dict(), "locks": locks}

    def pool_view(self) -> dict[str, Any]:
        return {}
