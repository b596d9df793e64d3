"""The draft tree's words: each node's label, a sampled node's check, the replacement's
distribution and the n-gram drafter's match, as Rich lines built from plain dicts (no Textual
here). The draft-tree pane and the trace-snapshot document both draw with them: `tree_words`
for what a tree says as a whole, `node_label` for each node, `replacement_line` for the
distribution a replacement was drawn from.

A request's view `tree` holds, per verified node of a sampled request, `p` (the target's
probability of the token), `q` (the draft's; None for coupled acceptance), `draw` (the uniform,
rejection only), `accept_prob` and, at a rejection, `replacement_top`; `ngram` holds the n-gram
drafter's match (context start and length).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from .legend import VERDICT_MARKS, Mark

Node = Mapping[str, Any]
Tree = Mapping[str, Any]
CONTEXT_SHOWN = 3  # tokens of the context shown on each side of a match before eliding


@dataclass(frozen=True)
class TreeWords:
    """What a draft tree says as a whole, beside its nodes' labels."""

    rejection: bool  # checked by rejection sampling (each node's `node_label` wants it)
    ngram: tuple[Text, ...]  # the n-gram drafter's match and its context; empty for a model's
    replacement_source: Node | None  # the rejected node with the replacement's distribution
    replacement_from: str  # that distribution's name: "max(p−q,0)" or "p"


def tree_words(request: Mapping[str, Any], tree: Tree) -> TreeWords:
    """The words of `request`'s draft `tree` (its view's `tree`) that the pane and the
    document both draw."""
    rejection = _is_rejection(tree)
    return TreeWords(
        rejection=rejection,
        ngram=tuple(_ngram_lines(tree, _context_of(request, tree))),
        replacement_source=_replacement_source(tree),
        # Drawn from the residual, or from p itself under coupled acceptance.
        replacement_from="max(p−q,0)" if rejection else "p",
    )


def _probability(value: float, letter: str = "") -> str:
    """'q.42' reads faster than 'q=0.42' in a narrow pane; 1 stays '1.00'."""
    return f"{letter}{value:.2f}".replace(f"{letter}0.", f"{letter}.", 1)


def _verdict_mark(node: Node) -> Mark:
    return VERDICT_MARKS.get(node.get("verdict") or "unverified", VERDICT_MARKS["unverified"])


def _is_sampled(node: Node) -> bool:
    """A sampled request's verified node carries its check (greedy nodes carry none)."""
    return node.get("p") is not None


def _is_rejection(tree: Tree) -> bool:
    """Rejection sampling draws a uniform at each check; coupled acceptance does not."""
    return any(node.get("draw") is not None for node in tree.get("nodes", []))


def _numbers(node: Node, rejection: bool = False) -> Text:
    """A node's numbers. A sampled verified node: p(x), the draft's q(x) and, under rejection,
    the draw u against the acceptance probability min(1, p/q) (`<`: accepted, `≥`: rejected).
    Any other node: the draft's probability q, except under rejection, whose drafts rank by
    max(q) rather than q(x): there a node without a check shows no number."""
    judged = node.get("verdict") in ("accepted", "rejected")
    if not (judged and _is_sampled(node)):
        if rejection:
            return Text()
        return Text(_probability(node["prob"], "q"), style="bright_black")
    text = Text(_probability(node["p"], "p"))
    q = node.get("q")
    text.append(f" {_probability(node['prob'] if q is None else q, 'q')}")  # coupled: the draft's
    if node.get("draw") is not None:
        kept = node["draw"] < node["accept_prob"]
        text.append(f" {_probability(node['draw'], 'u')}")
        text.append("<" if kept else "≥", style="bold" if kept else "red")
        text.append(_probability(node["accept_prob"]))
    return text


def node_label(node: Node, rejection: bool = False) -> Text:
    """A node's label, in the pane and the document alike: its mark, token and numbers, then
    the target's token at a rejection, or the word for a node the target did not judge."""
    verdict = node.get("verdict") or "unverified"
    mark = _verdict_mark(node)
    text = Text()
    text.append(f"{mark.symbol} ", style=mark.style)
    text.append(f"{node['token']}", style=mark.style if verdict == "unverified" else "bold")
    shown = _numbers(node, rejection)
    if shown:
        text.append(" ").append_text(shown)
    if verdict == "rejected" and node.get("target_token") is not None:
        text.append(" target ", style=mark.style)
        text.append(f"{node['target_token']}", style="bold")
    elif verdict in ("unverified", "discarded"):
        text.append(f" {verdict}", style=mark.style)
    return text


def _replacement_source(tree: Tree) -> Node | None:
    """The rejected node whose parent chose the replacement, with the top of the distribution
    it was drawn from (the engine keeps `replacement_top` on those alone; siblings share it)."""
    for node in tree.get("nodes", []):
        if node.get("verdict") == "rejected" and node.get("replacement_top"):
            return node
    return None


def replacement_line(node: Node, limit: int | None = None) -> Text:
    """The most likely tokens of the distribution the replacement was drawn from
    ('5 .64 · 7 .09 …', at most `limit`), the drawn token (the node's target token) in bold."""
    text = Text()
    drawn = node.get("target_token")
    for index, (token, share) in enumerate(node["replacement_top"][:limit]):
        if index:
            text.append(" · ", style="bright_black")
        text.append(str(token), style="bold" if token == drawn else "")
        text.append(f" {_probability(share)}", style="bright_black")
    return text


def _context_of(request: Mapping[str, Any], tree: Tree) -> list[int]:
    """The tokens the round was drafted from: the prompt and the generated tokens up to the
    root (later tokens came after the round)."""
    tokens = [*request.get("prompt", []), *request.get("generated", [])]
    return [int(t) for t in tokens[: int(tree.get("base_position", len(tokens) - 1)) + 1]]


def _ngram_lines(tree: Tree, context: Sequence[int]) -> list[Text]:
    """The n-gram drafter's match: which tokens, where they occurred first and that they end
    the context; then the context with both occurrences marked and the followers (the draft)
    underlined. Empty for a tree no n-gram drafter grew."""
    match = tree.get("ngram")
    if not match or not context:
        return []
    start, length = int(match["start"]), int(match["length"])
    end = len(context)
    mark = VERDICT_MARKS["ngram"]
    matched = " ".join(str(t) for t in context[start : start + length])
    head = Text(f"{mark.symbol} n-gram ", style=mark.style)
    head.append(f"[{matched}]", style=f"reverse {mark.style}")
    head.append(
        f" at {_span(start, length)} = the last {length} at {_span(end - length, length)}",
        style=mark.style,
    )
    drafted = len(tree.get("nodes", [])) - 1
    return [head, _context_strip(context, start, length, drafted)]


def _span(first: int, length: int) -> str:
    return str(first) if length == 1 else f"{first}–{first + length - 1}"


def _context_strip(context: Sequence[int], start: int, length: int, drafted: int) -> Text:
    """The context around the earlier occurrence and at its end, elided between: matched
    tokens in reverse video, the `drafted` tokens that followed the earlier one underlined."""
    end, style = len(context), VERDICT_MARKS["ngram"].style
    suffix = end - length
    shown = set(range(max(0, start - CONTEXT_SHOWN), min(end, start + length + CONTEXT_SHOWN)))
    shown |= set(range(max(0, suffix - 1), end))
    text, previous = Text(), -1
    text.append("context ", style="bright_black")
    for position in sorted(shown):
        if position > previous + 1:
            text.append("… ", style="bright_black")
        if start <= position < start + length or position >= suffix:
            text.append(str(context[position]), style=f"reverse {style}")
        elif start + length <= position < start + length + drafted:
            text.append(str(context[position]), style="underline")
        else:
            text.append(str(context[position]))
        text.append(" ")
        previous = position
    text.rstrip()
    return text
