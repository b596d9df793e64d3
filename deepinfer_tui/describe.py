"""One human-readable line per engine event (shared by the app's log and the CLI)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from engine import SamplingParams

Event = Mapping[str, Any]  # an engine event or session note, as Session.log() gives them


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


def restore_counts(restore: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """`reused 0, computed 3`; while an unfinished request's planned rows are still to compute,
    how far they are: `reused 0, computed 0 of 1783` (one waiting for blocks has computed none).
    A finished request holds no rows any more: it computed them all."""
    reused, planned = int(restore["reused_positions"]), int(restore["encoder_rows"])
    done = planned
    if request.get("status") != "finished":
        done = max(0, int(request.get("computed_positions", 0)) - reused)
    computed = f"{planned}" if done >= planned else f"{done} of {planned}"
    return f"reused {reused}, computed {computed}"


FOLDED_RUN = 4  # this many alike neighbours or more read as one entry (fewer are as short)


def _runs(items: Sequence[Any]) -> list[tuple[int, int]]:
    """(first index, length) of each run of equal neighbours in `items`."""
    runs: list[tuple[int, int]] = []
    for index, item in enumerate(items):
        if runs and item == items[runs[-1][0]]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((index, 1))
    return runs


def format_counts(values: Sequence[int]) -> str:
    """Per-request counts, each run of FOLDED_RUN or more equal ones folded: [2 ×64] or
    [3, 2 ×10, 1] (a 64-request budget reads as one entry, not 64)."""
    parts = []
    for first, length in _runs(values):
        value = str(values[first])
        parts.extend([f"{value} ×{length}"] if length >= FOLDED_RUN else [value] * length)
    return "[" + ", ".join(parts) + "]"


def ttl_cache_entries(snapshot: Any) -> list[Any]:
    """The ttl cache's entries of a snapshot; none under the blocks and radix policies, whose
    `cache` is the policy's own view (the radix tree), not a list of entries."""
    cache = snapshot.get("cache", [])
    return cache if isinstance(cache, list) else []


def cache_holdings(snapshot: Any) -> list[set[int]]:
    """The blocks each holder in the prefix cache holds: a ttl entry, or a radix tree node
    (the blocks policy's cached blocks are free: nobody holds them)."""
    cache = snapshot.get("cache", [])
    if isinstance(cache, list):
        return [set(entry.get("blocks", ())) for entry in cache]
    held: list[set[int]] = []
    nodes = [cache.get("tree")] if isinstance(cache, dict) and cache.get("tree") else []
    while nodes:
        node = nodes.pop()
        if node.get("blocks"):
            held.append(set(node["blocks"]))
        nodes.extend(node.get("children", ()))
    return held


def describe(event: Event) -> str:
    """The event as one line: its tick and request, then what its kind's formatter says (an
    unknown kind: just the kind)."""
    kind = event.get("kind", "?")
    rid = event.get("request_id")
    head = f"t{event.get('tick', 0)}" + (f" {rid}" if rid else "")
    formatter = _FORMATTERS.get(kind) if isinstance(kind, str) else None
    return f"{head} {formatter(event) if formatter else kind}"


# -- one formatter per event kind: what follows the tick and request id -----------------------


def _queued(event: Event) -> str:
    prompt = plural(event["prompt_positions"], "prompt position")
    line = f"queued: {prompt}, up to {plural(event['max_tokens'], 'new token')}"
    # Only what differs from the defaults (priority 0, greedy): the event carries no more.
    if event.get("priority"):
        line += f", priority {event['priority']}"
    if event.get("sampling"):
        line += f", sampling {SamplingParams.from_dict(event['sampling']).describe()}"
    return line


def _restore(event: Event) -> str:
    return (
        f"restore {event['cache']}: reused {event['reused_positions']}, "
        f"computing {event['encoder_rows']} ({event['reason']})"
    )


def _draft(event: Event) -> str:
    nodes = event.get("nodes", [])
    depth = max((n["depth"] for n in nodes), default=0)
    return f"draft tree: {plural(len(nodes) - 1, 'node')}, depth {depth}"


def _budget(event: Event) -> str:
    graph = f", graph size {event['graph_size']}" if event.get("graph_size") else ""
    return (
        f"budget {plural(event['total'], 'position')} for "
        f"{plural(len(event['requests']), 'request')} {format_counts(event['per_request'])}"
        f"{graph}, "
        f"expected {event['expected_tokens']:.2f}"
    )


def _verify(event: Event) -> str:
    verdicts = [n["verdict"] for n in event.get("nodes", [])]
    discarded = verdicts.count("discarded")  # verified below a rejected node
    return (
        f"verify: {verdicts.count('accepted')} accepted, "
        f"{verdicts.count('rejected')} rejected, "
        + (f"{discarded} discarded, " if discarded else "")
        + f"{verdicts.count('unverified')} unverified"
    )


def _commit(event: Event) -> str:
    line = (
        f"commit {format_tokens(event['tokens'])} accepted {event['accepted']} "
        f"of {event['verified']} verified ({event['outcome']})"
    )
    if event["rolled_back_positions"]:
        line += f" · rolled back {plural(event['rolled_back_positions'], 'position')}"
    return line + _freed(event)


def _publish(event: Event) -> str:
    return (
        f"publish {plural(event['positions'], 'position')} in "
        f"{format_blocks(event['blocks'])} "
        f"(hot until {event['hot_until']:g}s, warm until {event['warm_until']:g}s)"
    )


def _preempt(event: Event) -> str:
    lost = plural(event["lost_positions"], "position")
    kept = event.get("kept_positions")
    if kept is None:  # a trace from before preempted requests offered their prefix
        return f"preempted: lost {lost} ({event['reason']})"
    # The metrics' "recomputed" is the lost work the cache does not give back; the rest of
    # `recompute_positions` (every position but those kept) was never computed.
    recompute = max(0, int(event["lost_positions"]) - int(kept))
    return (
        f"preempted: gave back {lost}, the cache keeps {kept} for now; readmitted now, it would "
        f"recompute {recompute} and compute {event['recompute_positions']} in all "
        f"({event['reason']})"
    )


def _block_cached(event: Event) -> str:
    where = f"block {event['index']} of its table"
    return f"cached block #{event['block']} ({where}, hash {event['hash']})"


def _block_evicted(event: Event) -> str:
    return (
        f"evicted cached block #{event['block']} (hash {event['hash']}): reused from the free queue"
    )


def _insert(event: Event) -> str:
    blocks = format_blocks(event["blocks"]) if event.get("blocks") else "no new blocks"
    return f"insert {plural(event['positions'], 'position')} into the radix tree ({blocks})"


def _schedule(event: Event) -> str:
    budget = event.get("budget")
    entries = event.get("requests", [])
    plans = [
        " + ".join(f"{kind} {part[kind]}" for kind in ("prefill", "decode", "draft") if part[kind])
        for part in entries
    ]
    parts = []
    # A run of requests with the same plan is one entry: at 64 decoding requests the line
    # was 2,000 characters of "request-N decode 1 + draft 1".
    for first, length in _runs(plans):
        if length >= FOLDED_RUN:
            last = entries[first + length - 1]["request_id"]
            ids = f"{entries[first]['request_id']} … {last} ({length})"
            parts.append(f"{ids} {plans[first]}")
        else:
            parts.extend(
                f"{entries[i]['request_id']} {plans[i]}" for i in range(first, first + length)
            )
    of = f" of {budget:,}" if budget is not None else ""  # grouped, as the header and round view
    return f"schedule {plural(event['rows'], 'row')}{of}: " + ", ".join(parts)


def _prefill(event: Event) -> str:
    rows = plural(event["stop"] - event["start"], "row")
    return f"prefill {rows}: positions {event['start']}-{event['stop'] - 1} of {event['total']}"


def _evict(event: Event) -> str:
    return (
        f"evict {event['positions']}-position prefix ({event['reason']}), "
        f"blocks {format_blocks(event['blocks'])}"
    )


def _finished(event: Event) -> str:
    line = f"finished: {event['finish_reason']} after {plural(event['generated'], 'token')}"
    return line + (f" ({event['error']})" if event.get("error") else "")


def _rollback(event: Event) -> str:
    return f"rollback: removed {format_tokens(event['removed'])}{_freed(event)}"


def _freed(event: Event) -> str:
    """The blocks a commit or rollback gave back to the pool, if any."""
    return f" · freed {format_blocks(event['freed_blocks'])}" if event["freed_blocks"] else ""


_FORMATTERS: dict[str, Callable[[Event], str]] = {
    "queued": _queued,
    "restore": _restore,
    "draft": _draft,
    "budget": _budget,
    "schedule": _schedule,
    "block_cached": _block_cached,
    "block_evicted": _block_evicted,
    "insert": _insert,
    "prefill": _prefill,
    "verify": _verify,
    "commit": _commit,
    "publish": _publish,
    "evict": _evict,
    "preempt": _preempt,
    "deferred": lambda event: f"deferred: {event['reason']}",
    "finished": _finished,
    "rollback": _rollback,
    "step_aborted": lambda event: f"round aborted by {event['error_type']}; engine restored",
    "note": lambda event: f"· {event['text']}",
}


def error_message(error: BaseException) -> str:
    """What an error says, on one line, for a person: KeyError's str() wraps its message in
    quotes, so its argument is shown instead; an empty message falls back to the type."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(text.split()) or type(error).__name__


class Holders:
    """Who holds each block of a snapshot: the requests whose tables list it, the prefix
    cache, and the undo history for the references left over (the engine counts them all in
    a block's `refcount`). Indexed once, when first asked."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self._snapshot = snapshot
        self._requests: dict[int, list[str]] | None = None
        self._cached: Counter[int] = Counter()

    def of(self, block_id: int, refcount: int) -> str:
        if self._requests is None:
            self._requests = {}
            for request in self._snapshot.get("requests", []):
                for block in request.get("blocks", ()):
                    self._requests.setdefault(block["id"], []).append(request["id"])
            for held in cache_holdings(self._snapshot):
                self._cached.update(held)
        requests = self._requests.get(block_id, [])
        cached = self._cached[block_id]
        parts = requests[:3] + ([f"+{len(requests) - 3} more"] if len(requests) > 3 else [])
        if cached:
            parts.append("cache" if cached == 1 else f"cache×{cached}")  # × entries
        if refcount - len(requests) - cached > 0:
            parts.append("undo")
        return ", ".join(parts)
