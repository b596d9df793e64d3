"""The trace-snapshot document: the whole engine at one moment, as Rich renderables.

Unlike the app's screen it shows everything at once: header figures, the request table, every
request's block map and last draft tree, the prefix cache, the timeline, the last round's
budget, the serving metrics (those three in `document_views`) and the complete commit log. It is
built only from a snapshot dict and the session log, so the same state always renders the same
document. Meaning never rests on colour alone: states and verdicts also carry a symbol or word.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from .cache_view import cache_lines, cache_policy
from .columns import COLUMNS, request_cells
from .describe import (
    Holders,
    describe,
    format_blocks,
    format_tokens,
    plural,
    restore_counts,
    ttl_cache_entries,
)
from .diff_view import FrameBefore
from .document_views import view_sections
from .legend import BLOCK_MARKS, SLOT_MARKS, Mark, pool_legend, verdict_legend
from .tree_view import node_label, replacement_line, tree_words


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def document_title(snapshot: dict[str, Any]) -> str:
    scenario = snapshot.get("session", {}).get("scenario", "engine")
    return f"deepinfer-tui trace snapshot · {scenario} · tick {snapshot['tick']}"


def header(snapshot: dict[str, Any]) -> Table:
    """The figures of the moment, one labelled row each."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, value in _header_rows(snapshot):
        grid.add_row(label, value)
    return grid


def _header_rows(snapshot: dict[str, Any]) -> list[tuple[str, str | Text]]:
    metrics = snapshot["metrics"]
    requests, cache = metrics["requests"], metrics["cache"]
    rows: list[tuple[str, str | Text]] = []
    description = snapshot.get("session", {}).get("description")
    if description:
        rows.append(("scenario", Text(description)))  # a Text: a description is not markup
    rows += [
        ("tick · clock", f"t{snapshot['tick']} · {snapshot['clock']:g}s"),
        (
            "requests",
            f"{requests['queued']} queued · {requests['running']} running · "
            f"{requests['finished']} finished · scheduling order "
            f"{' '.join(snapshot['queue']) or '(none unfinished)'}",
        ),
        ("blocks", _blocks_line(metrics["blocks"])),
        ("speculation", _speculation_line(snapshot)),
        (
            "tokens",
            f"{requests['committed_tokens']} committed · {requests['preemptions']} preemptions "
            f"· {requests['evictions']} evictions for space",
        ),
        ("restores", f"{cache['hot']} hot · {cache['warm']} warm · {cache['cold']} cold"),
        ("work", _work_line(metrics["work"])),
        ("models", _models_line(snapshot["models"])),
        ("config", _config_line(snapshot["config"])),
    ]
    session = snapshot.get("session")
    if session:
        rows.append(
            (
                "session",
                f"{plural(session['operations'], 'operation')} · "
                f"{plural(session['pending_events'], 'scenario event')} pending · "
                f"undo {plural(snapshot['undo']['available'], 'round')}",
            )
        )
    return rows


def _blocks_line(blocks: dict[str, Any]) -> str:
    return (
        f"{blocks['held']} held by requests · "
        f"{blocks['cached']} cached · {blocks['retained']} retained for undo · "
        f"{blocks['free']} free · of {blocks['total']} ({blocks['shared']} shared)"
    )


def _speculation_line(snapshot: dict[str, Any]) -> str:
    drafts = snapshot["metrics"]["drafts"]
    rolled_back = snapshot["metrics"]["requests"]["rolled_back_positions"]
    return (
        f"acceptance {_percent(snapshot['acceptance'])} ({drafts['accepted']} of "
        f"{drafts['verified']} verified, {drafts['proposed']} drafted) · rolled back "
        f"{plural(rolled_back, 'position')}"
    )


def _work_line(work: dict[str, Any]) -> str:
    return (
        f"{work['target_forwards']} target forwards · {work['encoder_rows']} encoder rows · "
        f"{work['consumer_rows']} consumer rows · {work['draft_forwards']} draft forwards · "
        f"{work['draft_rows']} draft rows"
    )


def _models_line(models: dict[str, Any]) -> str:
    return " · ".join(
        f"{role} {m['identity']} (vocab {m['vocab_size']}, width {m['width']}, depth "
        f"{m['depth']}, window {m['window']})"
        for role, m in models.items()
    )


def _config_line(config: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in config.items() if key != "cost_curve") + (
        f", cost curve {config['cost_curve']}" if config.get("cost_curve") else ""
    )


def pool_strip(snapshot: dict[str, Any]) -> Text:
    strip = Text()
    for block in snapshot["pool"]["blocks"]:
        mark = _block_mark(block["state"])
        strip.append(mark.symbol, mark.style)
    strip.append("\n")
    strip.append(pool_legend())
    return strip


def _block_mark(state: str) -> Mark:
    return BLOCK_MARKS.get(state, Mark("?", "", state))


def request_table(snapshot: dict[str, Any]) -> Table:
    """The screen's request table (the same columns and cells), with the generated tokens."""
    table = Table(title="Requests", title_justify="left", expand=False)
    for column in COLUMNS:
        table.add_column(column.header, no_wrap=True)
    table.add_column("generated")
    for request in snapshot["requests"]:
        cells = [Text(text, style) for text, style in request_cells(request)]
        table.add_row(*cells, format_tokens(request["generated"]))
    return table


def _rolled_back_this_round(request: dict[str, Any], tick: int | None) -> set[int]:
    commit = request.get("last_commit")
    if not commit or commit.get("round") != tick:
        return set()
    committed = request["committed_positions"]
    return {p for p in commit.get("speculative_positions", []) if p >= committed}


def block_map(
    request: dict[str, Any], tick: int | None = None, holders: Holders | None = None
) -> RenderableType:
    if not request["blocks"]:
        why = "finished; its blocks went back to the pool or the cache"
        if request["status"] != "finished":
            why = "holds no blocks yet"
        return Text(f"block map: {why}", "italic")
    low, high = request["window"]
    table = Table(box=None, padding=(0, 1), show_edge=False)
    for column in ("block", "positions", "slots", "ref", "state", "hash"):
        table.add_column(column, no_wrap=True)
    rolled_back = _rolled_back_this_round(request, tick)
    for block in request["blocks"]:
        slots = Text()
        for offset, token in enumerate(block["slots"]):
            position = block["first_position"] + offset
            in_window = low <= position < high
            if token is None:  # the screen's marks: × rolled back this round, · empty
                mark = SLOT_MARKS["rolled_back" if position in rolled_back else "empty"]
                slots.append(mark.symbol, mark.style)
            else:
                slots.append(str(token), "bold underline" if in_window else "")
            slots.append(" ")
        mark = _block_mark(block["state"])
        state = Text(f"{mark.symbol} {block['state']}", mark.style)
        if block["state"] == "shared" and holders is not None:
            state.append(f" ({holders.of(block['id'], block['refcount'])})", "bright_black")
        first = block["first_position"]
        table.add_row(
            f"#{block['id']}",
            f"{first}–{first + len(block['slots']) - 1}",
            slots,
            str(block["refcount"]),
            state,
            block["hash"] or "–",
        )
    notes = Text(f"local window: positions {low}–{high - 1}", "italic")
    if request["dropped_blocks"]:
        dropped = format_blocks(request["dropped_blocks"])
        notes.append(f" · speculative blocks dropped this round: {dropped}", "red")
    return Group(table, notes)


def draft_tree(request: dict[str, Any]) -> RenderableType:
    tree_data = request["tree"]
    if not tree_data:
        return Text("draft tree: none yet", "italic")
    nodes = tree_data["nodes"]
    root_node = nodes[0]
    tree = Tree(
        Text(
            f"● {root_node['token']} root at position {tree_data['base_position']} "
            f"(round t{tree_data['round']})",
            "bold",
        )
    )
    words = tree_words(request, tree_data)
    for line in words.ngram:
        tree.add(line)
    branches: dict[int, Tree] = {root_node["id"]: tree}
    for node in nodes[1:]:
        parent = branches.get(node["parent"], tree)
        branches[node["id"]] = parent.add(node_label(node, words.rejection))
        if node is words.replacement_source:  # drawn from its parent's distribution
            drawn = f"replacement {node['target_token']} drawn from {words.replacement_from}: "
            line = Text(drawn, "cyan")
            branches[node["id"]].add(line.append_text(replacement_line(node)))
    commit = request["last_commit"]
    if commit:
        tree.add(Text(commit_summary(commit), "italic"))
    tree.add(verdict_legend())  # the marks say what the pane's legend says on screen
    return tree


def commit_summary(commit: dict[str, Any]) -> str:
    tokens = format_tokens(commit["tokens"])
    if not commit["verified"]:
        return f"committed {tokens}: the target's own next token (no draft verified)"
    ending = {
        "bonus": "then the target's bonus token",
        "replacement": "then the target's replacement token",
        "eos": "ending at the EOS token",
    }.get(commit["outcome"], commit["outcome"])
    line = (
        f"committed {tokens}: {commit['accepted']} of {commit['verified']} verified drafts "
        f"accepted, {ending}"
    )
    if commit["rolled_back_positions"]:
        count = commit["rolled_back_positions"]
        line += f"; rolled back {count} speculative position{'s' if count != 1 else ''}"
    return line


def request_section(
    request: dict[str, Any], tick: int | None = None, holders: Holders | None = None
) -> Panel:
    restore = request["restore"]
    lines = Text()
    lines.append(f"prompt {format_tokens(request['prompt'])} → generated ")
    lines.append(format_tokens(request["generated"]), "bold")
    lines.append(f" of {request['max_tokens']}")
    if request["eos_id"] is not None:
        lines.append(f" (eos {request['eos_id']})")
    if request["error"]:
        lines.append(f"\nerror: {request['error']}", "red")
    if restore:
        lines.append(
            f"\nrestore {restore['cache']}: "
            f"{restore_counts(restore, request)} ({restore['reason']}); "
            f"{restore['recovery_mode']} recovery"
        )
    if request["preemptions"]:
        lines.append(f"\npreempted {plural(request['preemptions'], 'time')}")
    status = request["status"] + (
        f" ({request['finish_reason']})" if request["finish_reason"] else ""
    )
    return Panel(
        Group(lines, block_map(request, tick, holders), draft_tree(request)),
        title=Text(f"{request['id']} · {status}"),  # a Text: ids are not markup
        title_align="left",
    )


def cache_table(snapshot: dict[str, Any]) -> RenderableType:
    if not ttl_cache_entries(snapshot):
        return Text("prefix cache: empty", "italic")
    table = Table(title="Prefix cache", title_justify="left")
    for column in ("tokens", "blocks", "state", "hot until", "warm until"):
        table.add_column(column)
    for entry in ttl_cache_entries(snapshot):
        table.add_row(
            format_tokens(entry["tokens"]),
            format_blocks(entry["blocks"]),
            _cache_state(entry),
            f"{entry['hot_until']:g}s",
            f"{entry['warm_until']:g}s",
        )
    return table


def prefix_cache_section(snapshot: dict[str, Any], log: list[dict[str, Any]]) -> RenderableType:
    """The prefix cache of the policy in use: the ttl entries' table, or the screen's view of
    the free queue (blocks) or the radix tree, as key 2 shows it with no request selected."""
    policy = cache_policy(snapshot)
    if policy == "ttl":
        return cache_table(snapshot)
    lines = cache_lines(snapshot, None, log, width=100)
    return Group(Text(f"Prefix cache · {policy}", "bold"), *lines)


def _cache_state(entry: dict[str, Any]) -> str:
    if entry["state"] == "expired":  # at warm_until; the next round releases its blocks
        return "expired; released next round"
    return entry["state"]


def commit_log(log: list[dict[str, Any]]) -> RenderableType:
    if not log:
        return Text("(no events yet)", "italic")
    return Text("\n".join(describe(event) for event in log))


def snapshot_document(
    snapshot: dict[str, Any], log: list[dict[str, Any]], before: FrameBefore | None = None
) -> Group:
    """Everything, in reading order: figures, requests, each request, cache, timeline,
    round, metrics, the round diff (against `before`), full log."""
    holders = Holders(snapshot)
    return Group(
        Rule(Text(document_title(snapshot))),  # a Text: a scenario name is not markup
        header(snapshot),
        Text("\nKV pool", "bold"),
        pool_strip(snapshot),
        Text(),
        request_table(snapshot),
        *(request_section(request, snapshot["tick"], holders) for request in snapshot["requests"]),
        prefix_cache_section(snapshot, log),
        *view_sections(snapshot, log, before),  # the timeline, round, metrics, diff
        Rule(f"Commit log · {len(log)} entries"),
        commit_log(log),
    )
