"""The compact block table: one row per block (its positions, fill and state), for requests
with many blocks and for blocks too large to draw slot by slot.

A 1,547-position request in 16-slot blocks is about 100 blocks: slot by slot that is some 200
wrapped lines. Compactly, runs of alike blocks (same state and holders, full, untouched this
round) fold into one row, and the blocks that matter now (the attention window's and those
this round changed) keep a row each, slot by slot when their blocks are small.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text

from ..columns import waited_blocks
from ..describe import format_blocks, plural
from ..legend import BLOCK_MARKS
from .view import View

Block = Mapping[str, Any]

SLOT_FORM_MAX_SLOTS = 32  # larger blocks are always drawn as one row each, never slot by slot
COMPACT_FROM_BLOCKS = 9  # a request with this many blocks gets the compact table
FOLD_FROM = 2  # alike blocks in a row fold into one line from this many on
FOLDED_IDS_MAX = 24  # cells of block ids a folded row lists before it shows first … last


def wants_compact(blocks: Sequence[Block], block_size: int) -> bool:
    return block_size > SLOT_FORM_MAX_SLOTS or len(blocks) >= COMPACT_FROM_BLOCKS


def compact_lines(
    blocks: Sequence[Block],
    block_size: int,
    expanded: Callable[[Block], bool],
    slot_lines: Callable[[Block], list[Text]],
    holders_of: Callable[[Block], str],
) -> list[Text]:
    """The compact rows; `expanded(block)`: the block keeps a row of its own (slot by slot
    via `slot_lines` when blocks are small); `holders_of(block)` says who holds a shared one."""
    lines: list[Text] = []
    run: list[Block] = []
    run_kind: tuple[Any, ...] = ()  # the run's blocks' kind, once it has any

    def flush() -> None:
        if len(run) >= FOLD_FROM:
            lines.append(_folded_line(run, block_size, holders_of))
        else:
            lines.extend(_range_line(b, block_size, holders_of) for b in run)
        run.clear()

    for block in blocks:
        if expanded(block):
            flush()
            small = block_size <= SLOT_FORM_MAX_SLOTS
            if small:
                lines.extend(slot_lines(block))
            else:
                lines.append(_range_line(block, block_size, holders_of))
            continue
        kind = _kind(block, block_size, holders_of)
        if run and kind != run_kind:
            flush()
        run.append(block)
        run_kind = kind
    flush()
    return lines


def _kind(block: Block, block_size: int, holders_of: Callable[[Block], str]) -> tuple[Any, ...]:
    return (
        block["state"],
        block["refcount"],
        _filled(block) == block_size,
        _held(block, holders_of),
    )


def _held(block: Block, holders_of: Callable[[Block], str]) -> str:
    """Who holds a shared block, in brackets ("" for the others: their state says it)."""
    return f" ({holders_of(block)})" if block["state"] == "shared" else ""


def _filled(block: Block) -> int:
    return sum(1 for token in block["slots"] if token is not None)


def _positions(first: int, last: int) -> str:
    return f"{first}–{last}"


def _state(text: Text, block: Block) -> None:
    mark = BLOCK_MARKS.get(block["state"], BLOCK_MARKS["committed"])
    text.append(f" ref {block['refcount']} ")
    text.append(f"{mark.symbol} {block['state']}", style=mark.style)


def _range_line(block: Block, block_size: int, holders_of: Callable[[Block], str]) -> Text:
    first = int(block["first_position"])
    filled = _filled(block)
    text = Text(f"#{block['id']} ")
    text.append(f"positions {_positions(first, first + block_size - 1)} ", style="bold")
    text.append("full" if filled == block_size else f"{filled:,}/{block_size:,} filled")
    _state(text, block)
    text.append(_held(block, holders_of), style="bright_black")
    return text


def _folded_line(run: Sequence[Block], block_size: int, holders_of: Callable[[Block], str]) -> Text:
    ids = format_blocks(b["id"] for b in run)
    if len(ids) > FOLDED_IDS_MAX:
        ids = f"#{run[0]['id']} … #{run[-1]['id']}"
    first = int(run[0]["first_position"])
    last = int(run[-1]["first_position"]) + block_size - 1
    text = Text(f"{ids} ")
    text.append(f"positions {_positions(first, last)} ", style="bold")
    full = _filled(run[-1]) == block_size
    text.append(f"{plural(len(run), 'block')} alike" + (", full" if full else ""))
    _state(text, run[0])
    text.append(_held(run[0], holders_of), style="bright_black")  # the run's: alike
    return text


def no_blocks_reason(request: Mapping[str, Any], view: View) -> list[str]:
    """Why a request holds no blocks: queued, waiting for room, or finished (and what of
    its prefix the cache still keeps)."""
    why = request.get("waiting_for")
    if request["status"] == "queued":
        waits = [f"waits for {why}"] if why else []
        if request.get("state") == "preempted":
            times = plural(int(request.get("preemptions", 0)), "time")
            return [
                f"preempted ({times}): gave its KV blocks back; on readmission it restores "
                "what the cache still keeps and computes the rest",
                *waits,
            ]
        return ["queued: no KV blocks yet (restore or prefill happens on admission)", *waits]
    if request["status"] == "running":  # admitted, but its first rows found no room
        needs = waited_blocks(request)
        if needs:
            free = int(view.snapshot.get("metrics", {}).get("blocks", {}).get("free", 0))
            return [f"waiting: no KV blocks yet (needs {plural(needs, 'free block')}, {free} free)"]
        return [f"waiting: no KV blocks yet ({why or 'the pool had no room for its rows'})"]
    reason = request.get("finish_reason") or "finished"
    lines = [f"finished ({reason}): holds no KV blocks any more"]
    for entry in view.cached_prefixes_of(request):
        held = f"{plural(len(entry['tokens']), 'position')} in {format_blocks(entry['blocks'])}"
        if entry["state"] == "expired":
            # The engine expires entries when a round starts: until then it holds the blocks.
            lines.append(
                f"its prefix expired at {entry['warm_until']:g}s: {held}, "
                "released at the next round"
            )
            continue
        until = entry["hot_until"] if entry["state"] == "hot" else entry["warm_until"]
        lines.append(f"its prefix is cached {entry['state']}: {held} (until {until:g}s)")
    return lines
