"""The round diff: what changed between two snapshots (the frame before and this one).

`round_diff` is a pure function of two `Engine.snapshot()`s: blocks allocated (refcount 0 to
more) and freed (back to 0), refcounts that moved, prefix-cache entries added and evicted
(ttl entries, the `blocks` policy's hashed blocks, the `radix` tree's blocks by the prefix
they end), tokens committed and rolled back, and requests whose state changed. `diff_lines`
draws it for the diff pane (key 6); `operation_words` names the operation that led from one
frame to the next (the live diff's and each replay frame's label). No Textual here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rich.text import Text

from .describe import format_blocks, format_tokens, plural, ttl_cache_entries
from .legend import DIFF_MARKS, Mark

Snapshot = Mapping[str, Any]
ADDED, REMOVED, CHANGED = DIFF_MARKS["added"], DIFF_MARKS["removed"], DIFF_MARKS["changed"]


@dataclass(frozen=True)
class RequestChange:
    request_id: str
    before: str | None  # its state in the earlier snapshot; None: not there yet
    after: str | None  # None: gone (an undone submit)
    committed: tuple[int, ...]  # tokens it gained
    rolled_back: tuple[int, ...]  # tokens it lost


@dataclass(frozen=True)
class RoundDiff:
    before_tick: int
    after_tick: int
    allocated: tuple[int, ...]  # blocks whose refcount went from 0 to more
    freed: tuple[int, ...]  # blocks whose refcount went back to 0
    refcounts: tuple[tuple[int, int, int], ...]  # (block, before, after), both above 0
    cache_added: tuple[str, ...]  # cache entries, in words
    cache_evicted: tuple[str, ...]
    requests: tuple[RequestChange, ...]

    @property
    def empty(self) -> bool:
        return not (
            self.allocated
            or self.freed
            or self.refcounts
            or self.cache_added
            or self.cache_evicted
            or self.requests
        )

    @property
    def committed(self) -> int:
        return sum(len(change.committed) for change in self.requests)

    @property
    def rolled_back(self) -> int:
        return sum(len(change.rolled_back) for change in self.requests)


def round_diff(before: Snapshot, after: Snapshot) -> RoundDiff:
    """What changed from `before` to `after` (two snapshots of one engine)."""
    old, new = _refcounts(before), _refcounts(after)
    blocks = sorted(set(old) | set(new))
    old_cache, new_cache = cache_entries(before), cache_entries(after)
    return RoundDiff(
        before_tick=int(before.get("tick", 0)),
        after_tick=int(after.get("tick", 0)),
        allocated=tuple(b for b in blocks if not old.get(b) and new.get(b)),
        freed=tuple(b for b in blocks if old.get(b) and not new.get(b)),
        refcounts=tuple(
            (b, old[b], new[b]) for b in blocks if old.get(b) and new.get(b) and old[b] != new[b]
        ),
        cache_added=tuple(words for key, words in new_cache.items() if key not in old_cache),
        cache_evicted=tuple(words for key, words in old_cache.items() if key not in new_cache),
        requests=tuple(_request_changes(before, after)),
    )


def _refcounts(snapshot: Snapshot) -> dict[int, int]:
    blocks = snapshot.get("pool", {}).get("blocks", [])
    return {int(block["id"]): int(block.get("refcount", 0)) for block in blocks}


def cache_entries(snapshot: Snapshot) -> dict[tuple[Any, ...], str]:
    """What the prefix cache holds, each entry by a key that outlives a radix split, in words."""
    cache = snapshot.get("cache", [])
    if snapshot.get("config", {}).get("cache_policy") == "blocks":  # hashed blocks
        cached = snapshot.get("pool", {}).get("cached", [])
        return {
            ("blocks", int(c["block"]), str(c["hash"])): f"block #{c['block']} hash {c['hash']}"
            for c in cached
        }
    if entries := ttl_cache_entries(snapshot):  # ttl: whole-prefix entries
        return {
            ("ttl", tuple(entry["tokens"]), tuple(entry["blocks"])): (
                f"entry of {plural(len(entry['tokens']), 'token')} "
                f"({format_blocks(entry['blocks'])})"
            )
            for entry in entries
        }
    if isinstance(cache, dict) and cache.get("tree"):  # radix: a block by the prefix it ends
        return {
            ("radix", block, prefix): f"block #{block} (prefix of {plural(prefix, 'token')})"
            for block, prefix in _radix_blocks(cache["tree"], 0)
        }
    return {}


def _radix_blocks(node: Mapping[str, Any], start: int) -> Iterator[tuple[int, int]]:
    """(block, tokens of the prefix it ends) for the node and its subtree; spans are whole
    blocks, so a split moves no block to another prefix."""
    tokens, blocks = len(node.get("tokens", ())), list(node.get("blocks", ()))
    size = tokens // len(blocks) if blocks else 0
    for index, block in enumerate(blocks):
        yield int(block), start + (index + 1) * size
    for child in node.get("children", ()):
        yield from _radix_blocks(child, start + tokens)


def request_state(request: Mapping[str, Any]) -> str:
    """A request's state in one word or two: queued, prefilling, ..., finished (length)."""
    state = str(request.get("state", request.get("status", "?")))
    reason = request.get("finish_reason")
    return f"{state} ({reason})" if state == "finished" and reason else state


def _request_changes(before: Snapshot, after: Snapshot) -> Iterator[RequestChange]:
    old = {r["id"]: r for r in before.get("requests", [])}
    new = {r["id"]: r for r in after.get("requests", [])}
    for request_id in [*new, *(i for i in old if i not in new)]:
        was, now = old.get(request_id), new.get(request_id)
        if was is now:  # the engine hands out one view of a finished request until it changes
            continue
        gone, came = list(was["generated"]) if was else [], list(now["generated"]) if now else []
        same = 0
        while same < min(len(gone), len(came)) and gone[same] == came[same]:
            same += 1
        change = RequestChange(
            request_id,
            request_state(was) if was else None,
            request_state(now) if now else None,
            tuple(came[same:]),
            tuple(gone[same:]),
        )
        if change.before != change.after or change.committed or change.rolled_back:
            yield change


def diff_lines(diff: RoundDiff | None, since: str = "") -> list[Text]:
    """The diff pane's lines (a long one wraps in the pane: nothing is cut); `since`: what led
    from one frame to the next."""
    if diff is None:
        return [Text("no earlier frame yet: step a round to see what it changed", "bright_black")]
    ticks = f"t{diff.before_tick} → t{diff.after_tick}"
    lines = [Text(f"{ticks}{f' · {since}' if since else ''}", style="bold")]
    if diff.empty:
        return [*lines, Text("nothing changed", style="bright_black")]
    tokens = [f"+{diff.committed} committed"] if diff.committed else []
    tokens += [f"-{diff.rolled_back} rolled back"] if diff.rolled_back else []
    if tokens:
        lines.append(Text(f"tokens: {', '.join(tokens)}"))
    lines += _block_lines(diff)
    lines += _listed("cache added", ADDED, diff.cache_added)
    lines += _listed("cache evicted", REMOVED, diff.cache_evicted)
    lines += [_request_line(change) for change in diff.requests]
    return lines


def _block_lines(diff: RoundDiff) -> list[Text]:
    lines = []
    for title, mark, blocks in (
        ("allocated", ADDED, diff.allocated),
        ("freed", REMOVED, diff.freed),
    ):
        if blocks:
            line = Text(f"{mark.symbol} ", style=mark.style)
            line.append(f"{plural(len(blocks), 'block')} {title}: {format_blocks(blocks)}")
            lines.append(line)
    if diff.refcounts:
        line = Text(f"{CHANGED.symbol} ", style=CHANGED.style)
        line.append(f"refcounts: {refcount_moves(diff.refcounts)}")
        lines.append(line)
    return lines


def refcount_moves(moves: Sequence[tuple[int, int, int]]) -> str:
    """`#0-#107 2→1 #108 1→2`: consecutive blocks whose refcount moved alike read as one run
    (a request's whole table moves together when the cache lets go of its entry)."""
    runs: list[list[int]] = []  # [first, last, before, after]
    for block, was, now in sorted(moves):
        if runs and block == runs[-1][1] + 1 and (was, now) == tuple(runs[-1][2:]):
            runs[-1][1] = block
        else:
            runs.append([block, block, was, now])
    return " ".join(
        f"{format_blocks(range(first, last + 1))} {was}→{now}" for first, last, was, now in runs
    )


def _listed(title: str, mark: Mark, items: tuple[str, ...]) -> list[Text]:
    if not items:
        return []
    line = Text(f"{mark.symbol} ", style=mark.style)
    line.append(f"{title}: {'; '.join(items)}")
    return [line]


def _request_line(change: RequestChange) -> Text:
    line = Text(f"{change.request_id} ", style="bold")
    if change.before != change.after:
        line.append(f"{change.before or 'new'} → {change.after or 'gone'} ")
    # Token ids in brackets, as everywhere: `+[14]` is a token, not a count.
    if change.committed:
        line.append(f"+{format_tokens(change.committed)} ", style=ADDED.style)
    if change.rolled_back:
        line.append(f"-{format_tokens(change.rolled_back)} ", style=REMOVED.style)
    line.rstrip()
    return line


class FrameBefore(NamedTuple):
    """The frame a diff starts from, and the operation that led from it ("step")."""

    snapshot: Snapshot
    since: str


class FrameMemory:
    """The live session's frame before its last operation, kept from the snapshots the app
    builds anyway (no snapshot of its own): the diff is against it, as a replay's is against
    its previous frame."""

    def __init__(self) -> None:
        self._current: Snapshot | None = None
        self._previous: Snapshot | None = None
        self._operations = -1
        self._since = ""

    def note(self, snapshot: Snapshot, operations: list[dict[str, Any]]) -> dict[str, Any]:
        """Record the snapshot after `operations`; the View's `previous` and `since`."""
        if len(operations) != self._operations:
            # The last operation's words read the frame right before it: none if more came.
            one_more = len(operations) == self._operations + 1
            just_before = self._current if one_more else None
            self._previous, self._operations = self._current, len(operations)
            self._since = (
                operation_words(operations[-1], just_before, snapshot) if operations else ""
            )
        self._current = snapshot
        return {"previous": self._previous, "since": self._since}


def frame_before(frames: Sequence[Any], position: int) -> dict[str, Any]:
    """A replay's View `previous` and `since` at `position`: the frame before, and the
    operation's label that led from it."""
    before = frames[position - 1].snapshot if position else None
    return {"previous": before, "since": frames[position].label if position else ""}


def operation_words(operation: Mapping[str, Any], before: Snapshot | None, after: Snapshot) -> str:
    """A recorded session operation in a few words ("step", "cancel request-2", "clock +1s"),
    read against the frames right before and after it: a submit names the request it added,
    a rollback the tokens it removed (fewer than asked where it reached the prompt). Without
    the frame before, a submit names none and a rollback says what was asked."""
    op = str(operation.get("op", "?"))
    if op == "cancel":
        return f"cancel {operation.get('id')}"
    if op == "rollback":
        request_id, asked = operation.get("id"), int(operation.get("tokens", 1))
        removed = asked
        if before is not None:
            removed = _generated(before, request_id) - _generated(after, request_id)
        words = f"roll back {request_id} by {plural(removed, 'token')}"
        return words if removed == asked else f"{words} (asked for {asked})"
    if op == "submit":
        added = _added_request(before, after)
        return f"submit {added}" if added else "submit"
    if op == "clock":
        return f"clock +{float(operation.get('seconds', 0)):g}s"
    return op  # step, undo: the frames' ticks say which round


def _generated(snapshot: Snapshot, request_id: Any) -> int:
    views = (r for r in snapshot.get("requests", []) if r["id"] == request_id)
    return next((len(r["generated"]) for r in views), 0)


def _added_request(before: Snapshot | None, after: Snapshot) -> str | None:
    if before is None:
        return None
    known = {r["id"] for r in before.get("requests", [])}
    return next((str(r["id"]) for r in after.get("requests", []) if r["id"] not in known), None)
