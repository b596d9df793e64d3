"""The request table's columns as data: header, meaning and cells, shared by the screen's
table, the exported document and the help legend, so all three use one vocabulary.

No Textual import: the export renders without it. A new column is one more `Column` and one
more cell in `request_cells`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from engine import SamplingParams

from .legend import CACHE_MARKS, status_mark


class Column(NamedTuple):
    key: str
    header: str
    meaning: str  # the help legend's line for it
    # Columns a narrow pane leaves out, lowest first (0: always shown): a column is shown
    # whole or not at all, so no value is ever cut.
    drop: int = 0


# In display order. A new column is one more entry here and one more cell in request_cells.
COLUMNS: tuple[Column, ...] = (
    Column("id", "request", "the request's id (user-N: added by hand)"),
    Column(
        "state",
        "state",
        "its state: queued, prefill done/total (prompt rows computed), decoding, waits N blk "
        "(free blocks) or budget (the token budget), preempted, finished; ↺N: preempted N times",
    ),
    Column("prompt", "prompt", "prompt length in tokens", drop=8),
    Column(
        "cache",
        "cache",
        "how its prompt was restored: hot4 / warm4 = 4 positions reused, cold = none; "
        "— = not admitted yet",
        drop=6,
    ),
    Column("tokens", "out/max", "tokens generated / max tokens", drop=7),
    Column("drafts", "acc/prop", "draft tokens accepted / proposed", drop=4),
    Column("blocks", "blk", "KV blocks it holds", drop=5),
    # Fixed at submit: it gives way before the counts that move (and before finish).
    Column(
        "sampling",
        "sampling",
        "how it chooses tokens: greedy (the argmax), or T temperature, k top-k, p top-p, "
        "s seed, e.g. T0.8 k20 p0.9 s123 (a setting at its default is left out)",
        drop=2,
    ),
    # It orders admission only under the priority policy: the first to give way.
    Column(
        "priority", "pri", "its priority: the smaller is admitted first (priority policy)", drop=1
    ),
    # The state's mark tells ✓ from ✗, not a cancel from an error: kept longer than sampling.
    Column("finish", "finish", "why it finished: length, stop (EOS), cancelled, error", drop=3),
)

Cell = tuple[str, str]  # (text, style): compared to skip cells that did not change

# The orders `o` steps through (then back to submission order): a column's key, and the
# value it sorts by (largest first).
ORDERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "prompt": lambda r: len(r.get("prompt", ())),
    "tokens": lambda r: len(r.get("generated", ())),
    "blocks": lambda r: len(r.get("blocks", ())),
    # Sorted largest first like the rest: the smallest priority (admitted first) leads.
    "priority": lambda r: -int(r.get("priority", 0)),
    "state": lambda r: (
        ("finished", "queued", "running").index(r["status"])
        if r["status"] in ("finished", "queued", "running")
        else 3
    ),
}
# The states `s` steps through (then back to every request).
STATE_FILTERS: tuple[str, ...] = ("running", "queued", "finished")


def following(options: tuple[str, ...], current: str | None) -> str | None:
    """The option after `current` (None: the first); after the last, None."""
    if current is None:
        return options[0]
    index = options.index(current) + 1 if current in options else len(options)
    return options[index] if index < len(options) else None


CELL_PADDING = 2  # blank cells around a cell's text, both sides together (the table's PADDING x 2)


def waited_blocks(request: Mapping[str, Any]) -> int:
    """The free blocks a waiting request needs, 0 if it waits for something else."""
    return int(request.get("needs_blocks") or 0)


def schedule_state(request: Mapping[str, Any]) -> str:
    """What the scheduler does with the request, short: `prefill 512/1884`, `decoding`,
    `waits 118 blk` (free blocks) or `waits budget` (the token budget), else its status."""
    state = request.get("state")
    if state == "prefilling":
        return f"prefill {request['computed_positions']}/{request['prefill_total']}"
    if state == "waiting":
        count = waited_blocks(request)
        return f"waits {count} blk" if count else "waits budget"
    if state in ("decoding", "preempted"):
        return state
    return str(request["status"])


def sampling_text(sampling: Mapping[str, Any] | None) -> str:
    """`greedy`, or the settings in use: `T0.8 k20 p0.9 s123`, `T0.8 s123` (top-k 0 and
    top-p 1 are the defaults, left out). The engine's own words for them."""
    return "greedy" if not sampling else SamplingParams.from_dict(sampling).describe()


def request_cells(request: Mapping[str, Any]) -> tuple[Cell, ...]:
    mark = status_mark(request)
    status = request["status"]
    state = f"{mark.symbol} {schedule_state(request)}"
    if request.get("preemptions"):
        state += f" ↺{request['preemptions']}"
    restore = request.get("restore")
    if restore is None:
        cache: Cell = ("—", "bright_black")
    else:
        kind = restore["cache"]
        reused = restore.get("reused_positions", 0)
        label = kind if kind == "cold" or not reused else f"{kind}{reused}"
        cache = (label, CACHE_MARKS[kind].style if kind in CACHE_MARKS else "")
    generated = len(request.get("generated", []))
    finish = request.get("finish_reason") or ""
    text = sampling_text(request.get("sampling"))
    sampling: Cell = (text, "bright_black" if text == "greedy" else "")
    return (
        (request["id"], "bold" if status == "running" else ""),
        (state, mark.style),
        (str(len(request.get("prompt", ()))), ""),
        cache,
        (f"{generated}/{request['max_tokens']}", ""),
        (f"{request.get('accepted', 0)}/{request.get('proposed', 0)}", ""),
        (str(len(request.get("blocks", []))), ""),
        sampling,
        (str(request.get("priority", 0)), ""),
        (finish, mark.style if finish else ""),
    )
