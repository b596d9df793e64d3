"""Symbols and colours, defined once: panes draw with them, the legend and help explain them.

Every colour is paired with a symbol or a word, so the screen reads the same with NO_COLOR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.text import Text

# Red is for loss and failure only (cancelled, dropped, rejected, rolled back, errors); the
# prefix cache has hues of its own. Fixed 256-colour names, not ANSI ones: a theme maps ANSI
# red and magenta to near-equal pinks, and these stay apart in every theme. Each reads on the
# dark and the light theme's background alike (contrast 2.8 or more; the lighter tints these
# replaced read 1.3-2.3 on the light one).
CACHE_HUE = "medium_purple3"
HOT_STYLE = f"bold {CACHE_HUE}"
WARM_STYLE = "royal_blue1"
# A finished request: a blue far from the cache's purples (the themes draw ANSI blue purple).
FINISHED_HUE = "dodger_blue2"
COLD_STYLE = "steel_blue"


@dataclass(frozen=True)
class Mark:
    symbol: str
    style: str
    meaning: str


BLOCK_MARKS: dict[str, Mark] = {
    "committed": Mark("█", "green", "committed: held by one request"),
    "shared": Mark(
        "▓",
        "cyan",
        "shared: held by more than one holder, named after it: requests, cache (×N: by N "
        "cache entries), undo (the undo history)",
    ),
    "cached": Mark("▒", CACHE_HUE, "cached: held only by the prefix cache"),
    "retained": Mark("░", "yellow", "retained: kept for the undo history only"),
    "dropped": Mark("×", "bold red", "dropped: freed this round (retained while undo needs it)"),
    "free": Mark("·", "bright_black", "free"),
}

STATUS_MARKS: dict[str, Mark] = {
    "queued": Mark("◌", "yellow", "queued: waiting for a round"),
    "running": Mark("▶", "bold green", "running: admitted; computes in the next rounds"),
    "length": Mark("✓", FINISHED_HUE, "finished: reached max tokens"),
    "stop": Mark("✓", FINISHED_HUE, "finished: produced its EOS token"),
    "cancelled": Mark("✗", "red", "finished: cancelled"),
    "error": Mark("!", "bold red", "finished: failed with an error"),
}

CACHE_MARKS: dict[str, Mark] = {
    "hot": Mark("hot", HOT_STYLE, "hot: cached rows reused as they are; later positions computed"),
    "warm": Mark("warm", WARM_STYLE, "warm: encoder prefix reused, consumers replayed"),
    "cold": Mark("cold", COLD_STYLE, "cold: nothing cached, full prefill"),
}

VERDICT_MARKS: dict[str, Mark] = {
    "root": Mark("●", "bold", "root: the pending token the round started from"),
    "accepted": Mark("✓", "bold green", "accepted: target agreed, committed"),
    "rejected": Mark("✗", "red", "rejected: target chose another token (shown)"),
    "discarded": Mark(
        "⊘", "dim red", "discarded: verified below a rejected node, thrown away with it (unjudged)"
    ),
    "unverified": Mark("?", "bright_black", "unverified: outside this round's budget"),
    "extra": Mark("+", "bold cyan", "bonus / replacement token from the target"),
    "ngram": Mark(
        "≡",
        "yellow",
        "n-gram draft: the context's last n tokens matched an earlier occurrence (both in "
        "reverse video); the draft is the tokens that followed it there (underlined)",
    ),
}
# The numbers on a draft-tree node (p, q, u as in the speculative-sampling papers).
DRAFT_TERMS: dict[str, str] = {
    "q.42": "the draft's probability q(x) of the node's token x (the tree and the budget "
    "rank by it); a rejection-sampled draft ranks by max q, so its unchecked nodes show none",
    "p.42": "a sampled request's verified node: the target's probability p(x) of its token",
    "u.31<.78": "rejection sampling: the uniform draw u against the acceptance probability "
    "min(1, p/q); < accepted, ≥ rejected (coupled acceptance: kept when the target's sample "
    "is x, which has probability p(x))",
    "~ p, ~ max(p−q,0)": "a sampled replacement, drawn from the target's p (coupled) or the "
    "residual max(p−q,0) renormalised (rejection); below it that distribution's most likely "
    "tokens, the drawn one in bold",
}

# The prefix-cache view (key 2): one mark per thing it tells apart, for each cache policy.
PREFIX_MARKS: dict[str, Mark] = {
    "hot": Mark("●", HOT_STYLE, "ttl entry hot: its rows reused as they are"),
    "warm": Mark("◐", WARM_STYLE, "ttl entry warm: its encoder prefix reused, consumers replayed"),
    "expired": Mark("○", "bright_black", "ttl entry expired: its blocks are released next round"),
    "queued_cached": Mark("▒", CACHE_HUE, "free queue: a cached block, evicted when taken"),
    "queued_free": Mark("·", "bright_black", "free queue: a plain free block"),
    "hit": Mark("✓", "bold green", "hit: reused at the selected request's restore"),
    "cached": Mark("■", CACHE_HUE, "cached: a full block with its hash, computed by the request"),
    "uncached": Mark("-", "bright_black", "not cached: a partial block or one not yet stored"),
    "matched": Mark("◆", "bold green", "radix node the selected request matched at its restore"),
    "node": Mark("○", "default", "radix node: its span, blocks, lock count and last access"),
    "evicted": Mark("✗", "red", "evicted this round (least recently used unlocked leaf)"),
}

# The round diff (key 6): what the frame before had not, had and lost, or held otherwise.
DIFF_MARKS: dict[str, Mark] = {
    "added": Mark(
        "+",
        "green",
        "added since the frame before: blocks allocated, cache entries, tokens committed",
    ),
    "removed": Mark(
        "-",
        "red",
        "gone since the frame before: blocks freed, cache entries evicted, tokens rolled back",
    ),
    "changed": Mark("~", "yellow", "changed: a block's refcount (before→after)"),
}

SLOT_MARKS: dict[str, Mark] = {
    "window": Mark("‹n›", "underline", "stored slot the pending token's local attention reads"),
    "rolled_back": Mark("×", "red", "speculative slot rolled back this round"),
    "empty": Mark("·", "bright_black", "empty slot (not yet computed)"),
}


def status_mark(request: Mapping[str, Any]) -> Mark:
    """The mark for a request view: its status, or its finish reason once finished."""
    status = request.get("status")
    if status == "finished":
        reason = request.get("finish_reason") or "length"
        return STATUS_MARKS.get(reason, STATUS_MARKS["length"])
    return STATUS_MARKS.get(str(status), STATUS_MARKS["queued"])


def pool_legend_entries() -> list[Text]:
    """The whole-pool strip's legend, one entry (symbol and word) each."""
    entries = []
    for name, mark in BLOCK_MARKS.items():
        entry = Text(mark.symbol, style=mark.style)
        entry.append(f" {name}", style="")
        entries.append(entry)
    entries.append(Text("‹n› window", style="underline"))
    # In a block's slots, × and · mean otherwise than for a whole block.
    rolled_back, empty = SLOT_MARKS["rolled_back"], SLOT_MARKS["empty"]
    entries.append(
        Text.assemble(
            "a slot ",
            (rolled_back.symbol, rolled_back.style),
            " rolled back, ",
            (empty.symbol, empty.style),
            " empty",
        )
    )
    return entries


def verdict_legend() -> Text:
    """One line naming the draft tree's marks: ✓ accepted · ✗ rejected · …"""
    words = {"extra": "bonus or replacement"}  # the others are named by their verdict
    line = Text()
    for name in ("accepted", "rejected", "discarded", "unverified", "extra"):
        mark = VERDICT_MARKS[name]
        if line:
            line.append(" · ")
        line.append(mark.symbol, style=mark.style)
        line.append(f" {words.get(name, name)}")
    return line


def pool_legend(width: int | None = None) -> Text:
    """The pool strip's legend; with a `width`, entries are packed into lines that fit it."""
    return Text("\n").join(packed(pool_legend_entries(), width))


def packed(entries: list[Text], width: int | None) -> list[Text]:
    """Legend entries two spaces apart, in lines that fit `width` (None: one line), so no
    entry is split between two lines (a symbol on one, its word on the next)."""
    lines: list[Text] = [Text()]
    for entry in entries:
        line = lines[-1]
        if line and width is not None and line.cell_len + 2 + entry.cell_len > width:
            line = Text()
            lines.append(line)
        if line:
            line.append("  ")
        line.append_text(entry)
    return lines


# The header's words, and the jargon the panes and the log use, one line each.
HEADER_TERMS: dict[str, str] = {
    "▶ auto 0.25s": "auto-run is stepping, a round every 0.25 s (+ and - change the wait)",
    "◌N ▶N ✓N": "requests queued, running, finished",
    "held": "blocks held by requests (█ committed and ▓ shared)",
    "cached / retained / free": "blocks held only by the cache, only by undo history, or by none",
    "accept": "draft tokens accepted of those verified, over the session",
    "committed": "tokens committed so far; the sparkline: tokens per round, last 16 rounds",
}
TERMS: dict[str, str] = {
    "hot cursor": "a cached sequence's whole state (every row and the next-token logits), "
    "reused as it is until its hot time ends",
    "consumers replayed": "warm restore: the cached encoder rows are kept and the layers that "
    "read them (consumers) are computed again",
    "graph size, expected": "budget line: the batch size the cost curve runs this round at (as "
    "a captured graph), and the tokens the drafts' path probabilities expect from it",
    "reverse": "in the pool strip, the selected request's own blocks are drawn in reverse video",
    "publish": "a request's full blocks put into the prefix cache, for later requests to reuse",
    "evict": "cached blocks freed to make room; a later request with that prefix restores cold",
    "preempt": "a running request's blocks taken back for room; it is recomputed when readmitted",
}


def full_legend(extra: tuple[tuple[str, Mapping[str, str]], ...] = ()) -> Text:
    """Every symbol group with its meaning (help screen); `extra`: more (title, {term:
    meaning}) groups, first."""
    text = Text()
    groups = (
        ("Requests", STATUS_MARKS),
        ("Cache path", CACHE_MARKS),
        ("KV blocks", BLOCK_MARKS),
        ("Block slots", SLOT_MARKS),
        ("Prefix cache (key 2)", PREFIX_MARKS),
        ("Draft tree", VERDICT_MARKS),
        ("Round diff (key 6)", DIFF_MARKS),
    )
    words = (
        *extra,
        ("Header", HEADER_TERMS),
        ("Draft tree numbers", DRAFT_TERMS),
        ("Terms", TERMS),
    )
    for title, terms in words:
        text.append(f"{title}\n", style="bold underline")
        for term, meaning in terms.items():
            text.append(f"  {term}", style="bold")
            text.append(f"  {meaning}\n")
        text.append("\n")
    for title, marks in groups:
        text.append(f"{title}\n", style="bold underline")
        for mark in marks.values():
            text.append(f"  {mark.symbol:>4}  ", style=mark.style)
            text.append(f"{mark.meaning}\n")
        text.append("\n")
    text.rstrip()
    return text
