"""One human-readable line per engine event (shared by the app's log and the CLI)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def format_tokens(values: Sequence[int]) -> str:
    """Token ids as the log, the CLI and exports show them: [3 14 15]."""
    return "[" + " ".join(str(v) for v in values) + "]"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 position', '2 positions'."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def format_blocks(values: Iterable[int]) -> str:
    """Block ids as the log, the CLI and exports show them, in their order, each run of
    consecutive ids as a range: #2 #7-#9 (a 50-block publish reads as one range)."""
    runs: list[list[int]] = []
    for block in values:
        if runs and block == runs[-1][1] + 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    return " ".join(f"#{first}" if first == last else f"#{first}-#{last}" for first, last in runs)


def describe(event: Mapping[str, Any]) -> str:
    kind = event.get("kind", "?")
    rid = event.get("request_id")
    head = f"t{event.get('tick', 0)}" + (f" {rid}" if rid else "")
    if kind == "queued":
        return (
            f"{head} queued: {plural(event['prompt_positions'], 'prompt position')}, "
            f"up to {plural(event['max_tokens'], 'new token')}"
        )
    if kind == "restore":
        return (
            f"{head} restore {event['cache']}: reused {event['reused_positions']}, "
            f"computing {event['encoder_rows']} ({event['reason']})"
        )
    if kind == "draft":
        nodes = event.get("nodes", [])
        depth = max((n["depth"] for n in nodes), default=0)
        return f"{head} draft tree: {plural(len(nodes) - 1, 'node')}, depth {depth}"
    if kind == "budget":
        graph = f", graph size {event['graph_size']}" if event.get("graph_size") else ""
        return (
            f"{head} budget {plural(event['total'], 'position')} for "
            f"{plural(len(event['requests']), 'request')} {event['per_request']}{graph}, "
            f"expected {event['expected_tokens']:.2f}"
        )
    if kind == "verify":
        verdicts = [n["verdict"] for n in event.get("nodes", [])]
        return (
            f"{head} verify: {verdicts.count('accepted')} accepted, "
            f"{verdicts.count('rejected')} rejected, {verdicts.count('unverified')} unverified"
        )
    if kind == "commit":
        line = (
            f"{head} commit {format_tokens(event['tokens'])} accepted {event['accepted']} "
            f"of {event['verified']} verified ({event['outcome']})"
        )
        if event["rolled_back_positions"]:
            line += f" · rolled back {plural(event['rolled_back_positions'], 'position')}"
        if event["freed_blocks"]:
            line += f" · freed {format_blocks(event['freed_blocks'])}"
        return line
    if kind == "publish":
        return (
            f"{head} publish {plural(event['positions'], 'position')} in "
            f"{format_blocks(event['blocks'])} "
            f"(hot until {event['hot_until']:g}s, warm until {event['warm_until']:g}s)"
        )
    if kind == "evict":
        return (
            f"{head} evict {event['positions']}-position prefix ({event['reason']}), "
            f"blocks {format_blocks(event['blocks'])}"
        )
    if kind == "preempt":
        lost = plural(event["lost_positions"], "position")
        return f"{head} preempted: lost {lost} ({event['reason']})"
    if kind == "deferred":
        return f"{head} deferred: {event['reason']}"
    if kind == "finished":
        line = (
            f"{head} finished: {event['finish_reason']} after {plural(event['generated'], 'token')}"
        )
        return line + (f" ({event['error']})" if event.get("error") else "")
    if kind == "rollback":
        freed = f" · freed {format_blocks(event['freed_blocks'])}" if event["freed_blocks"] else ""
        return f"{head} rollback: removed {format_tokens(event['removed'])}{freed}"
    if kind == "step_aborted":
        return f"{head} round aborted by {event['error_type']}; engine restored"
    if kind == "note":
        return f"{head} · {event['text']}"
    return f"{head} {kind}"


def error_message(error: BaseException) -> str:
    """What an error says, on one line, for a person: KeyError's str() wraps its message in
    quotes, so its argument is shown instead; an empty message falls back to the type."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(text.split()) or type(error).__name__
