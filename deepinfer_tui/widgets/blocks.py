"""The KV block map: the selected request's block table, then a strip of the whole pool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from .legend import BLOCK_MARKS, CACHE_MARKS, SLOT_MARKS, Legend, status_mark
from .pool_strip import PoolStrip
from .quiet import update_static
from .view import RequestView, View


def _this_round(request: RequestView, tick: int) -> Mapping[str, Any] | None:
    commit = request.get("last_commit")
    if commit and commit.get("round") == tick:
        return commit
    return None


def render_block_table(request: RequestView, view: View) -> Text:
    snapshot = view.snapshot
    pool = snapshot.get("pool", {})
    block_size = int(pool.get("block_size", 1))
    vocab = int(snapshot.get("models", {}).get("target", {}).get("vocab_size", 100))
    digits = len(str(max(vocab - 1, 0)))
    id_width = len(str(max(int(pool.get("num_blocks", 1)) - 1, 0))) + 1
    committed = int(request.get("committed_positions", 0))
    window_start, window_stop = request.get("window", [0, 0])
    commit = _this_round(request, view.tick)
    rolled_back: set[int] = set()
    if commit:
        rolled_back = {p for p in commit.get("speculative_positions", []) if p >= committed}

    text = Text()
    mark = status_mark(request)
    text.append(f"{request['id']} ", style="bold")
    text.append(f"{mark.symbol} {request['status']}", style=mark.style)
    text.append(f" · {committed} committed · pending {request.get('pending_token')}")
    if window_stop > window_start:
        text.append(" · window ")
        text.append(f"‹{window_start}–{window_stop - 1}›", style=SLOT_MARKS["window"].style)
    text.append("\n")
    restore = request.get("restore")
    if restore:
        kind = restore["cache"]
        text.append(f"restore {kind}", style=CACHE_MARKS[kind].style if kind in CACHE_MARKS else "")
        text.append(
            f": reused {restore['reused_positions']}, computed {restore['suffix_positions']}"
        )
        text.append(f" ({restore['reason']})\n", style="bright_black")

    blocks = request.get("blocks", [])
    if not blocks:
        text.append(_no_blocks_reason(request, view), style="italic")
    for block in blocks:
        first = int(block["first_position"])
        text.append(f"#{block['id']}".ljust(id_width + 1))
        text.append("[")
        for offset, token in enumerate(block["slots"]):
            position = first + offset
            if token is None:
                symbol = "×" if position in rolled_back else "·"
                style = SLOT_MARKS["rolled_back" if position in rolled_back else "empty"].style
                text.append(f" {symbol:>{digits}} ", style=style)
            elif window_start <= position < window_stop:
                text.append(f"‹{token:>{digits}}›", style="bold underline")
            else:
                text.append(f" {token:>{digits}} ")
        text.append("]")
        state = BLOCK_MARKS.get(block["state"], BLOCK_MARKS["committed"])
        text.append(f" ref {block['refcount']} ")
        text.append(f"{state.symbol} {block['state']}", style=state.style)
        text.append("\n")
    empty_slots = " " + " ".join("×".rjust(digits + 1) for _ in range(block_size)) + " "
    for block_id in request.get("dropped_blocks", []):
        text.append(f"#{block_id}".ljust(id_width + 1))
        text.append(f"[{empty_slots[1:]}]", style=BLOCK_MARKS["dropped"].style)
        text.append(" ref 0 ")
        text.append("× dropped", style=BLOCK_MARKS["dropped"].style)
        text.append(" (rolled back this round)\n")
    for event in view.events_this_tick(str(request["id"]), "rollback"):
        removed = " ".join(str(t) for t in event.get("removed", []))
        text.append(f"rolled back [{removed}]", style="bold yellow")
        freed = event.get("freed_blocks", [])
        if freed:
            text.append(" · freed " + " ".join(f"#{b}" for b in freed), style="yellow")
        text.append("\n")
    if commit:
        text.append(
            f"round {commit['round']}: verified {commit['verified']}, "
            f"accepted {commit['accepted']}, committed {len(commit['tokens'])} "
            f"({commit['outcome']})"
        )
        if commit.get("rolled_back_positions"):
            text.append(f", rolled back {commit['rolled_back_positions']}", style="red")
        text.append("\n")
    text.rstrip()
    return text


def _no_blocks_reason(request: RequestView, view: View) -> str:
    if request["status"] == "queued":
        return "queued: no KV blocks yet (restore or prefill happens on admission)\n"
    reason = request.get("finish_reason") or "finished"
    lines = [f"finished ({reason}): holds no KV blocks any more"]
    for entry in view.cached_prefixes_of(request):
        blocks = " ".join(f"#{b}" for b in entry["blocks"])
        until = entry["hot_until"] if entry["state"] == "hot" else entry["warm_until"]
        lines.append(
            f"its prefix is cached {entry['state']}: {len(entry['tokens'])} positions "
            f"in {blocks} (until t={until:g})"
        )
    return "\n".join(lines) + "\n"


class BlockMap(VerticalScroll):
    """Renders the selected request's blocks and the pool strip; unchanged parts are not redrawn."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._table: Text | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="block-table")
        yield PoolStrip(id="pool-strip")
        yield Legend(id="pool-legend")

    def show(self, view: View, request_id: str | None) -> None:
        request = view.request(request_id)
        if request is None:
            table = Text("no request selected", style="italic")
            title = "KV blocks"
        else:
            table = render_block_table(request, view)
            title = f"KV blocks · {request['id']}"
        if table != self._table:
            self._table = table
            update_static(self.query_one("#block-table", Static), table)
        if self.border_title != title:
            self.border_title = title
        self.query_one(PoolStrip).show(view, request)
