"""The prefix-cache view: what the cache policy in use holds, and how the selected request used it.

Built from a snapshot, the selected request's view and the log (no Textual here), one set of
lines per policy (see docs/cache-policies.md):
- `ttl`: the entries, their state (hot / warm / expired), length, blocks and times;
- `blocks`: the free queue as a strip from head (taken, and evicted if cached, first) to tail,
  and the selected request's blocks with their hash chain, the ones its restore hit marked;
- `radix`: the tree of spans with lock counts and last access, the nodes the selected request
  matched marked, and this round's evictions.
Every mark has a symbol as well as a colour (`legend.PREFIX_MARKS`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rich.text import Text

from .describe import format_blocks, plural, ttl_cache_entries
from .legend import PREFIX_MARKS, Mark

Event = Mapping[str, Any]
Snapshot = Mapping[str, Any]
MAX_NODES = 80  # tree lines drawn; a bigger tree says how many more it has
MAX_CHAIN = 24  # a request's blocks listed in its hash chain
STRIP_LINES = 4  # lines of the free-queue strip; a longer queue shows its head and a count
SPAN_TOKENS = 3  # tokens of a span shown (a radix span: 2 to 8, as the width allows)
# Each policy's legend line: mark name, word.
TTL_WORDS = {"hot": "hot", "warm": "warm", "expired": "expired"}
BLOCKS_WORDS = {
    "queued_cached": "cached",
    "queued_free": "free",
    "hit": "hit",
    "cached": "hashed",
    "uncached": "partial",
}
RADIX_WORDS = {"matched": "matched", "node": "node", "evicted": "evicted"}


def cache_policy(snapshot: Snapshot) -> str:
    return str(snapshot.get("config", {}).get("cache_policy", "ttl"))


def cache_lines(
    snapshot: Snapshot, request: Mapping[str, Any] | None, log: Sequence[Event], width: int
) -> list[Text]:
    """The view's lines for a pane `width` cells wide; `request`: the selected one, if any."""
    policy = cache_policy(snapshot)
    if policy == "blocks":
        return _blocks_lines(snapshot, request, width)
    if policy == "radix":
        return _radix_lines(snapshot, request, log, width)
    return _ttl_lines(snapshot, width)


def _legend(words: Mapping[str, str], width: int) -> list[Text]:
    """The marks' symbols and short words, packed into lines no wider than `width` (entries
    two cells apart, or one if that keeps them on one line)."""
    entries = []
    for name, word in words.items():
        mark = PREFIX_MARKS[name]
        entries.append(Text(mark.symbol, mark.style) + Text(f" {word}"))
    tight = sum(entry.cell_len for entry in entries) + len(entries) - 1  # one cell apart
    gap = " " if tight <= width < tight + len(entries) - 1 else "  "
    lines = [Text()]
    for entry in entries:
        if lines[-1] and lines[-1].cell_len + len(gap) + entry.cell_len > width:
            lines.append(Text())
        if lines[-1]:
            lines[-1].append(gap)
        lines[-1].append_text(entry)
    return lines


def _marked(mark: Mark, text: str) -> Text:
    line = Text(mark.symbol, mark.style)
    line.append(f" {text}")
    return line


# -- ttl -------------------------------------------------------------------------------------


def _ttl_lines(snapshot: Snapshot, width: int) -> list[Text]:
    entries = ttl_cache_entries(snapshot)
    lines = _legend(TTL_WORDS, width)
    if not entries:
        return [*lines, Text("ttl cache: empty (a request publishes its prefix)", "italic")]
    lines.append(Text(f"ttl cache: {plural(len(entries), 'entry', 'entries')}", "bold"))
    for entry in entries:
        mark = PREFIX_MARKS.get(entry["state"], PREFIX_MARKS["expired"])
        tokens = entry["tokens"]
        lines.append(
            _marked(mark, f"{entry['state']:<7} {plural(len(tokens), 'token')} {_span(tokens)}")
        )
        times = f"hot until {entry['hot_until']:g}s · warm until {entry['warm_until']:g}s"
        lines.append(Text(f"└ {format_blocks(entry['blocks'])} · {times}"))
    return lines


# -- blocks (vLLM) ---------------------------------------------------------------------------


def _blocks_lines(snapshot: Snapshot, request: Mapping[str, Any] | None, width: int) -> list[Text]:
    pool = snapshot.get("pool", {})
    queue = list(pool.get("free_queue", []))
    cached = {entry["block"] for entry in pool.get("cached", [])}
    in_queue = [block for block in queue if block in cached]
    lines = _legend(BLOCKS_WORDS, width)
    lines.append(
        Text(
            f"free queue {len(queue)} · {len(in_queue)} cached ({len(cached)} hashed in all)",
            "bold",
        )
    )
    lines += _queue_strip(queue, cached, width)
    if in_queue:
        lines.append(
            Text(f"next evicted: #{in_queue[0]} ({queue.index(in_queue[0]) + 1} from the head)")
        )
    return lines + _hash_chain(request)


def _queue_strip(queue: list[int], cached: set[int], width: int) -> list[Text]:
    """The queue head first, one cell a block, wrapped; `head` and `tail` name its ends."""
    if not queue:
        return [Text("head · (empty: every block is held) · tail", "italic")]
    cells = max(8, width - 10)
    shown = queue if len(queue) <= cells * STRIP_LINES else queue[: cells * (STRIP_LINES - 1)]
    strip = Text()
    for block in shown:
        mark = PREFIX_MARKS["queued_cached" if block in cached else "queued_free"]
        strip.append(mark.symbol, mark.style)
    lines = []
    for start in range(0, len(strip), cells):
        line = Text("head " if start == 0 else "     ", "bold")
        lines.append(line + strip[start : start + cells])
    if len(shown) < len(queue):
        rest = queue[len(shown) :]
        hidden = sum(block in cached for block in rest)
        lines.append(Text(f"     … {len(rest):,} more, {hidden:,} of them cached …"))
    lines[-1].append(" ")  # a run of its own: SVG renderers may drop a run's leading space
    lines[-1].append("tail", "bold")
    return lines


def _hash_chain(request: Mapping[str, Any] | None) -> list[Text]:
    if request is None:
        return [Text("no request selected: its blocks' hash chain shows here", "bright_black")]
    hits = set((request.get("restore") or {}).get("hit_blocks", []))
    blocks = request.get("blocks", [])
    head = Text(f"{request['id']}: ", "bold")
    restore = request.get("restore")
    if restore is None:
        head.append("not admitted yet")
    else:
        head.append(f"restore {restore['cache']}, hit {format_blocks(sorted(hits)) or 'nothing'}")
    lines = [head]
    if not blocks:
        lines.append(Text("holds no blocks (finished, or not admitted)", "italic"))
    parent = "root"
    for block in blocks[:MAX_CHAIN]:
        digest = block.get("hash")
        name = "hit" if block["id"] in hits else "cached" if digest else "uncached"
        chain = f"{digest} ← {parent}" if digest else "partial: not cached"
        lines.append(_marked(PREFIX_MARKS[name], f"#{block['id']:<3} {chain}"))
        parent = digest or parent
    if len(blocks) > MAX_CHAIN:
        lines.append(Text(f"… {len(blocks) - MAX_CHAIN} more blocks", "bright_black"))
    return lines


# -- radix (SGLang) --------------------------------------------------------------------------


def _radix_lines(
    snapshot: Snapshot, request: Mapping[str, Any] | None, log: Sequence[Event], width: int
) -> list[Text]:
    cache = snapshot.get("cache")
    tree = cache.get("tree") if isinstance(cache, Mapping) else None
    lines = _legend(RADIX_WORDS, width)
    hits = set(((request or {}).get("restore") or {}).get("hit_blocks", []))
    nodes = list(_walk(tree, "")) if tree else []
    key = " · [span …] (length) blocks, lock N, @last access" if width >= 72 else ""
    lines.append(Text(f"radix tree: {plural(len(nodes), 'node')}{key}", "bold"))
    shown_tokens = min(8, max(2, (width - 30) // 3))
    for prefix, node in nodes[:MAX_NODES]:
        matched = bool(hits & set(node["blocks"]))
        mark = PREFIX_MARKS["matched" if matched else "node"]
        # Leading spaces apart from the drawing: an SVG renderer may drop a run's leading spaces.
        indent = len(prefix) - len(prefix.lstrip(" "))
        line = Text(prefix[:indent])
        line.append(prefix[indent:], "bright_black")
        line.append_text(_marked(mark, _node_label(node, shown_tokens)))
        lines.append(line)
    if len(nodes) > MAX_NODES:
        lines.append(Text(f"… {len(nodes) - MAX_NODES} more nodes", "bright_black"))
    if request is not None:  # after the tree: a small pane shows the tree first
        lines.append(Text(f"{request['id']} matched {format_blocks(sorted(hits)) or 'nothing'}"))
    return lines + _evictions(snapshot, log)


def _walk(node: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """Every node below `node`, depth first, with the tree-drawing prefix of its line."""
    children = node.get("children", [])
    for index, child in enumerate(children):
        last = index == len(children) - 1
        yield prefix + ("└─" if last else "├─"), child
        yield from _walk(child, prefix + ("  " if last else "│ "))


def _node_label(node: Mapping[str, Any], shown_tokens: int) -> str:
    return (
        f"{_span(node['tokens'], shown_tokens)} ({len(node['tokens'])}) "
        f"{format_blocks(node['blocks'])} "
        f"lock {node['lock']} @{node['last_access']}"
    )


def _span(tokens: Sequence[int], count: int = SPAN_TOKENS) -> str:
    """A span shortened to its first `count` tokens: [1 2 3 …]."""
    shown = " ".join(str(token) for token in tokens[:count])
    return f"[{shown} …]" if len(tokens) > count else f"[{shown}]"


def _evictions(snapshot: Snapshot, log: Sequence[Event]) -> list[Text]:
    tick = snapshot.get("tick")
    evicted: list[Event] = []
    for event in reversed(log):  # this round's events are among the log's last ones
        if int(event.get("tick", 0)) < int(tick or 0):
            break
        if event.get("kind") == "evict" and event.get("tick") == tick:
            evicted.insert(0, event)
    if not evicted:
        return [Text(f"no eviction in round t{tick}", "bright_black")]
    lines = [Text(f"evicted in round t{tick}:", "bold")]
    for event in evicted:
        text = f"{format_blocks(event['blocks'])} ({plural(event['positions'], 'position')})"
        lines.append(_marked(PREFIX_MARKS["evicted"], f"{text}, {event['reason']}"))
    return lines
