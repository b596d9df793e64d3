"""The debugger app driven by real key presses (Pilot), checked on the engine and the panes."""

from __future__ import annotations

import asyncio
import gc
import re
from pathlib import Path
from typing import Any

import pytest
from rich.segment import Segment
from textual import events
from textual.app import App, ComposeResult
from textual.command import CommandPalette
from textual.geometry import Region
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, Input
from textual.widgets._toast import Toast

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.collector import GC_PAUSE_LIMIT
from deepinfer_tui.columns import CELL_PADDING
from deepinfer_tui.describe import describe
from deepinfer_tui.legend import BLOCK_MARKS, STATUS_MARKS
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.screens.help import HelpScreen
from deepinfer_tui.screens.rollback import RollbackScreen
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap, CommitLog, DraftTree, RequestTable, StatusBar, row_table
from deepinfer_tui.widgets.view import View
from tests.app import tour
from tests.app.helpers import make_app, messages, palette_listed, shown_lines, wait_until

SIZE = (120, 40)


def request_view(app: DebuggerApp, request_id: str) -> dict[str, Any]:
    (request,) = [r for r in app.session.snapshot()["requests"] if r["id"] == request_id]
    return request


def cell(app: DebuggerApp, request_id: str, column: str) -> str:
    return app.query_one(RequestTable).get_cell(request_id, column).plain


def log_text(app: DebuggerApp) -> str:
    return "\n".join(app.query_one(CommitLog).lines)


def visible_rows(log: CommitLog) -> list[str]:
    """The log's rows as drawn on screen now (Line API), trailing blanks dropped."""
    height = log.scrollable_content_region.height
    return [log.render_line(y).text.rstrip() for y in range(height)]


def every_row(view: ScrollView) -> list[Strip]:
    """All rows of a Line-API pane, top to bottom, read by scrolling through it page by page."""
    total = view.virtual_size.height
    height = view.scrollable_content_region.height
    rows: list[Strip] = []
    for top in range(0, total, height):
        view.scroll_to(y=top, animate=False)
        skip = top - round(view.scroll_offset.y)  # the last page cannot scroll past the end
        page = [view.render_line(y) for y in range(height)]
        rows.extend(page[skip : skip + min(height, total - top)])
    return rows


def every_log_row(log: CommitLog) -> list[str]:
    return [row.text.rstrip() for row in every_row(log)]


def drawn_table(table: RequestTable) -> list[list[Segment]]:
    """The table's visible lines as drawn (Line API): segments with their styles."""
    return [list(table.render_line(y)) for y in range(table.size.height)]


def described(app: DebuggerApp) -> list[str]:
    return [describe(event) for event in app.session.log()]


async def select(pilot: Any, app: DebuggerApp, request_id: str) -> None:
    """Select `request_id` with the arrow keys (as the tour does); the panes follow."""
    await tour.select(pilot, request_id)
    await pilot.pause()
    assert app.selected_id == request_id


async def test_step_advances_the_engine_and_updates_the_table_in_place() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.engine.tick == 0
        assert cell(app, "request-1", "state").endswith("queued")
        await pilot.press("space")
        assert app.engine.tick == 1
        assert cell(app, "request-1", "state").endswith("decoding")
        generated = len(request_view(app, "request-1")["generated"])
        assert generated > 0
        assert cell(app, "request-1", "tokens") == f"{generated}/8"
        assert cell(app, "request-1", "cache") == "cold"
        # New requests from the scenario appear as new rows.
        assert app.query_one(RequestTable).row_count == 3
        await select(pilot, app, "request-2")
        await pilot.press("n")
        assert app.engine.tick == 2
        # The cursor stays on the same request across a refresh (rows are not rebuilt).
        assert app.selected_id == "request-2"
        restore = request_view(app, "request-2")["restore"]
        assert restore["cache"] == "hot"  # it shares request-1's published prefix
        assert cell(app, "request-2", "cache") == f"hot{restore['reused_positions']}"
        assert "tick 2" in str(app.query_one(StatusBar).content)


async def test_the_table_draws_the_current_counts_after_every_step() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(RequestTable)
        while app.session.can_step():
            await pilot.press("space")
            await pilot.pause()
            lines = ["".join(s.text for s in line).split() for line in drawn_table(table)]
            for request in app.session.snapshot()["requests"]:
                (row,) = [words for words in lines if words and words[0] == request["id"]]
                assert f"{len(request['generated'])}/{request['max_tokens']}" in row
                assert f"{request['accepted']}/{request['proposed']}" in row
                assert str(len(request["blocks"])) in row


async def test_a_pane_narrower_than_its_columns_scrolls_the_rows_sideways() -> None:
    app = make_app()
    async with app.run_test(size=(16, 24)) as pilot:
        await pilot.press("space", "space", "space")
        await pilot.pause()
        table = app.query_one(RequestTable)
        width = table.scrollable_content_region.width
        assert table.max_scroll_x >= 5
        whole = ["".join(s.text for s in line) for line in drawn_table(table)]
        table.scroll_to(x=5, animate=False)
        await pilot.pause()
        shifted = ["".join(s.text for s in line) for line in drawn_table(table)]
        assert shifted[0].startswith(whole[0][5:width])  # the header moves with the rows
        await pilot.press("shift+home")
        await pilot.pause()
        assert table.scroll_x == 0
        await pilot.press("shift+end")
        await pilot.pause()
        assert table.scroll_x == table.max_scroll_x


def test_the_columns_fit_with_the_padding_the_table_draws() -> None:
    # columns.py (no Textual import: exports use it) sizes columns with the table's padding.
    assert CELL_PADDING == 2 * row_table.PADDING


async def test_keys_and_a_click_move_the_cursor_and_the_panes_follow() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        await pilot.pause()
        table = app.query_one(RequestTable)
        ids = table.row_keys
        assert len(ids) >= 3 and app.selected_id == ids[0]
        await pilot.press("ctrl+end")
        await pilot.pause()
        assert app.selected_id == ids[-1]
        assert str(app.query_one(BlockMap).border_title).endswith(ids[-1])
        await pilot.press("up")
        assert app.selected_id == ids[-2]
        await pilot.press("ctrl+home")
        assert app.selected_id == ids[0]
        await pilot.press("end")  # Home and End too, as in Textual's lists
        assert app.selected_id == ids[-1]
        await pilot.press("home")
        assert app.selected_id == ids[0]
        # A click on the second row (the header is the table's first line) selects it.
        top = table.content_region.y - table.region.y
        await pilot.click(RequestTable, offset=(3, top + table.header_height + 1))
        await pilot.pause()
        assert app.selected_id == ids[1]
        assert str(app.query_one(BlockMap).border_title).endswith(ids[1])
        # The blank below the last row selects nothing.
        await pilot.click(RequestTable, offset=(3, top + table.header_height + len(ids) + 1))
        await pilot.pause()
        assert app.selected_id == ids[1]


async def test_the_cursor_row_is_drawn_in_the_cursor_colours_across_the_pane() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "down")
        await pilot.pause()
        table = app.query_one(RequestTable)
        lines = drawn_table(table)
        width = table.scrollable_content_region.width
        cursor = lines[table.header_height + table.cursor_row]
        other = lines[table.header_height + (1 - table.cursor_row)]
        assert sum(segment.cell_length for segment in cursor) == width
        backgrounds = {segment.style.bgcolor for segment in cursor if segment.style}
        assert len(backgrounds) == 1  # one colour from the first cell to the pane's edge
        assert backgrounds != {segment.style.bgcolor for segment in other if segment.style}


async def test_cancel_finishes_the_selected_queued_and_running_requests() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        await select(pilot, app, "request-2")
        assert request_view(app, "request-2")["status"] == "queued"
        await pilot.press("c")
        cancelled = request_view(app, "request-2")
        assert (cancelled["status"], cancelled["finish_reason"]) == ("finished", "cancelled")
        assert cell(app, "request-2", "finish") == "cancelled"

        await select(pilot, app, "request-1")
        assert request_view(app, "request-1")["status"] == "running"
        assert " in KV · pending [" in str(app.query_one(BlockMap).table)
        await pilot.press("c")
        cancelled = request_view(app, "request-1")
        assert cancelled["finish_reason"] == "cancelled"
        assert "request-1 finished: cancelled" in log_text(app)
        # A finished request holds no rows and waits for no token: its heading says so.
        heading = str(app.query_one(BlockMap).table).splitlines()[0]
        assert heading.endswith(f"finished · {len(cancelled['generated'])} generated")


async def test_keys_that_cannot_act_are_dimmed_and_do_nothing() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        # Nothing generated and nothing to undo yet.
        assert app.check_action("undo", ()) is None
        assert app.check_action("rollback", ()) is None
        assert app.check_action("step", ()) is True
        await pilot.press("u", "b")
        assert app.engine.tick == 0 and app.session.operations == []
        # ... and each says why instead of doing nothing silently.
        said = [n.message for n in app._notifications]
        assert said[-2:] == ["nothing to undo", "request-1 has no generated tokens to roll back"]

        await pilot.press("space")
        await select(pilot, app, "request-3")  # cancelled by the scenario
        assert app.check_action("cancel_request", ()) is None
        assert app.screen.active_bindings["c"].enabled is False  # greyed in the Footer
        before = len(app.session.log())
        await pilot.press("c", "b")
        assert len(app.session.log()) == before
        said = [n.message for n in app._notifications]
        assert said[-2:] == [
            "request-3 has already finished",
            "request-3 was cancelled: it cannot be rolled back",
        ]

        while app.session.can_step():
            await pilot.press("space")
        assert app.check_action("step", ()) is None
        assert app.screen.active_bindings["space"].enabled is False
        tick = app.engine.tick
        await pilot.press("space", "n")
        assert app.engine.tick == tick
        # Replay-only keys are hidden entirely in a live session.
        assert app.check_action("frame_forward", ()) is False


async def test_rollback_and_undo() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        tokens = request_view(app, "request-1")["generated"]
        generated = len(tokens)
        assert app.selected_id == "request-1"
        await pilot.press("b")
        after = request_view(app, "request-1")
        assert len(after["generated"]) == generated - 1
        assert cell(app, "request-1", "tokens") == f"{generated - 1}/8"
        assert "request-1 rollback: removed" in log_text(app)
        assert after["generated"] == tokens[:-1]
        block_table = str(app.query_one(BlockMap).table)
        assert f"rolled back [{tokens[-1]}]" in block_table

        tick = app.engine.tick
        await pilot.press("space")
        assert app.engine.tick == tick + 1
        await pilot.press("u")
        assert app.engine.tick == tick
        await pilot.press("u", "u")
        assert app.engine.tick == 0
        assert app.check_action("undo", ()) is None


async def test_a_finished_row_follows_its_rollback_and_the_undo_of_it() -> None:
    # Finished rows are drawn once and skipped while their view stays the same object: a
    # reopened request, a request finished again and one put back by undo are drawn anew.
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        while app.session.can_step():
            await pilot.press("space")
        done = request_view(app, "request-1")
        assert done["status"] == "finished" and done["finish_reason"] == "length"
        generated = len(done["generated"])
        await select(pilot, app, "request-1")
        await pilot.press("B", "ctrl+a", "ctrl+k", "4", "enter")
        assert cell(app, "request-1", "tokens") == f"{generated - 4}/8"
        assert cell(app, "request-1", "state").endswith("queued")
        assert cell(app, "request-1", "finish") == ""
        while request_view(app, "request-1")["status"] != "finished":
            await pilot.press("space")
        again = request_view(app, "request-1")  # finished again: a new view, new draft counts
        assert again["proposed"] > done["proposed"]
        assert cell(app, "request-1", "drafts") == f"{again['accepted']}/{again['proposed']}"
        assert cell(app, "request-1", "tokens") == f"{generated}/8"
        assert cell(app, "request-1", "finish") == "length"
        await pilot.press("u")  # back to before its last round
        assert cell(app, "request-1", "finish") == ""
        assert cell(app, "request-1", "tokens") != f"{generated}/8"


async def test_rollback_by_a_typed_count() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        generated = len(request_view(app, "request-1")["generated"])
        await pilot.press("B")
        assert isinstance(app.screen, RollbackScreen)
        await pilot.press("z", "enter")  # not a number: the form stays open
        assert isinstance(app.screen, RollbackScreen)
        assert "whole number" in str(app.screen.query_one("#form-error").content)
        assert len(request_view(app, "request-1")["generated"]) == generated
        await pilot.press("ctrl+a", "ctrl+k", "2", "enter")
        assert not isinstance(app.screen, RollbackScreen)
        assert len(request_view(app, "request-1")["generated"]) == generated - 2
        # The header's committed count is what the table's out column adds up to.
        await pilot.pause()
        requests = app.session.snapshot()["requests"]
        held = sum(len(r["generated"]) for r in requests)
        outs = [cell(app, r["id"], "tokens").split("/")[0] for r in requests]
        assert held == sum(map(int, outs))
        assert f"committed {held} " in str(app.query_one(StatusBar).content)


async def test_add_request_creates_a_request_and_selects_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        assert isinstance(app.screen, AddRequestScreen)
        await pilot.press(*"7,8,9")
        await pilot.press("tab", "ctrl+a", "ctrl+k", "3", "enter")
        assert not isinstance(app.screen, AddRequestScreen)
        (added,) = [r for r in app.session.snapshot()["requests"] if r["prompt"] == [7, 8, 9]]
        assert added["max_tokens"] == 3 and added["status"] == "queued"
        assert app.selected_id == added["id"]
        assert app.query_one(RequestTable).row_count == 2


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [
        ("x,y", "whole number"),
        ("1_0", "token 1 must be a whole number, got '1_0'"),
        ("٣", "token 1 must be a whole number"),  # an Arabic-Indic three: not ASCII
        ("", "prompt: needs at least one token id"),
        ("1,,2", "prompt: a comma with no token id next to it"),
        ("1,999", "999"),
        ("1,2/77", "the EOS token id must be in [0, 32), got 77"),
    ],
)
async def test_bad_add_input_shows_an_error_and_changes_nothing(prompt: str, problem: str) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        before = app.session.snapshot()
        await pilot.press("a")
        prompt, _, eos = prompt.partition("/")  # after "/": typed into the EOS field
        if prompt:
            await pilot.press(*prompt)
        if eos:
            await pilot.press("tab", "tab", *eos)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, AddRequestScreen)  # still open, showing why
        assert problem in screen.error
        assert app.session.snapshot() == before
        await pilot.press("escape")
        assert not isinstance(app.screen, AddRequestScreen)
        assert app.session.snapshot() == before


async def test_typing_in_a_form_does_not_trigger_debugger_keys() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        await pilot.press("space", "c", "u", "q")
        assert app.engine.tick == 0
        assert app.screen.query_one("#prompt", Input).value == " cuq"


async def test_selection_drives_the_detail_panes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        # Step until some request's round rejected a draft node (the scenario stages them).
        rejected: dict[str, Any] | None = None
        while rejected is None and app.session.can_step():
            await pilot.press("space")
            for request in app.session.snapshot()["requests"]:
                tree = request["tree"]
                this_round = bool(tree) and tree["round"] == app.engine.tick
                if this_round and any(n["verdict"] == "rejected" for n in tree["nodes"]):
                    rejected = request
        assert rejected is not None
        await select(pilot, app, rejected["id"])
        blocks = app.query_one(BlockMap)
        assert rejected["id"] in str(blocks.border_title)
        table_text = str(blocks.table)
        for block in rejected["blocks"]:
            assert f"#{block['id']} " in table_text
        for block_id in rejected["dropped_blocks"]:
            assert f"#{block_id} " in table_text and "dropped" in table_text
        tree_pane = app.query_one(DraftTree)
        assert rejected["id"] in str(tree_pane.border_title)
        labels = []
        pending = [tree_pane.root]
        while pending:
            node = pending.pop()
            labels.append(str(node.label))
            pending.extend(node.children)
        for node in rejected["tree"]["nodes"]:
            if node["verdict"] == "rejected":
                assert any(
                    label.startswith(f"✗ {node['token']} ")
                    and label.endswith(f"target {node['target_token']}")
                    for label in labels
                )
        other = next(i for i in app.view.request_ids if i != rejected["id"])
        await select(pilot, app, other)
        assert other in str(app.query_one(DraftTree).border_title)
        assert other in str(app.query_one(BlockMap).border_title)


async def test_f_filters_the_log_to_the_selected_request() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        assert "request-3" in log_text(app)
        await select(pilot, app, "request-2")
        await pilot.press("f")
        assert app.query_one(CommitLog).filter_id == "request-2"
        filtered = log_text(app)
        assert "request-2" in filtered
        assert "request-1" not in filtered and "request-3" not in filtered
        await pilot.press("space")  # new events keep the filter
        assert "request-1" not in log_text(app)
        await pilot.press("f")
        assert app.query_one(CommitLog).filter_id is None
        assert "request-3" in log_text(app)


async def test_the_log_follows_the_newest_event_to_the_end_of_the_scenario() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(CommitLog)
        while app.session.can_step():
            await pilot.press("space")
            await pilot.pause()
            assert log.lines == described(app)
            # The newest event is the last thing drawn, however long the log has grown.
            drawn = [row for row in visible_rows(log) if row]
            assert described(app)[-1].endswith(drawn[-1])
        assert log.virtual_size.height > log.scrollable_content_region.height  # it scrolled
        assert f"{len(app.session.log())} events" in str(log.border_title)


async def test_the_log_wraps_long_lines_inside_the_pane_at_80x24() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "space", "t", "space")
        await pilot.pause()
        log = app.query_one(CommitLog)
        width = log.scrollable_content_region.width
        assert any(len(line) > width for line in described(app))  # something must wrap
        rows = every_log_row(log)
        assert rows and all(len(row) <= width for row in rows)
        assert log.max_scroll_x == 0  # nothing hides to the right
        # Wrapping only splits lines at spaces: every character is still on screen.
        assert "".join(rows).replace(" ", "") == "".join(described(app)).replace(" ", "")


async def test_a_greedy_engines_draft_pane_says_so_within_its_width_at_80x24() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(greedy=True)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        tree = app.query_one(DraftTree)
        assert "request-1" in str(tree.border_title)
        label = tree.render_line(0).text.rstrip()
        assert "greedy: no draft model" in label
        assert len(label) <= tree.scrollable_content_region.width


async def test_undo_shortens_the_log_and_new_rounds_append_again() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(CommitLog)
        await pilot.press("space", "space")
        before = list(log.lines)
        await pilot.press("space")
        assert len(log.lines) > len(before)
        await pilot.press("u")
        await pilot.pause()
        assert log.lines == before == described(app)
        assert before[-1].endswith([row for row in visible_rows(log) if row][-1])
        await pilot.press("space")
        assert log.lines == described(app)
        await select(pilot, app, "request-2")
        await pilot.press("f", "u")  # undo while filtered keeps only request-2's older lines
        assert log.lines == [
            describe(e) for e in app.session.log() if e.get("request_id") == "request-2"
        ]
        # Lines described while filtered, and those described before, make up the whole log
        # again when the filter goes: none stale, none missing, in order.
        await pilot.press("space", "space", "f")
        assert log.filter_id is None
        assert log.lines == described(app)
        await pilot.press("u", "f")
        assert log.lines == [
            describe(e) for e in app.session.log() if e.get("request_id") == "request-2"
        ]
        await pilot.press("u", "c", "f")  # other events where the undone ones were
        assert log.lines == described(app)


GLYPHS = {mark.symbol for mark in BLOCK_MARKS.values()}


def glyph_rows(blocks: BlockMap) -> list[Strip]:
    """The drawn rows of block glyphs (the table, header and legend rows hold words)."""
    rows = every_row(blocks)
    return [row for row in rows if row.text.strip() and set(row.text) <= GLYPHS | {" "}]


def drawn_glyphs(blocks: BlockMap) -> list[tuple[str, bool]]:
    """Each drawn pool glyph, in order, with whether it is in reverse video."""
    glyphs = []
    for row in glyph_rows(blocks):
        for segment in row:
            for character in segment.text:
                if character != " ":
                    glyphs.append((character, bool(segment.style and segment.style.reverse)))
    return glyphs


@pytest.mark.parametrize("size", [SIZE, (80, 24)])
async def test_the_pool_strip_draws_every_block_in_groups_of_eight(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("space", "space")
        await pilot.pause()
        blocks = app.query_one(BlockMap)
        pool = app.session.snapshot()["pool"]
        mine = {block["id"] for block in request_view(app, "request-1")["blocks"]}
        assert mine and app.selected_id == "request-1"
        expected = [(BLOCK_MARKS[b["state"]].symbol, b["id"] in mine) for b in pool["blocks"]]
        assert drawn_glyphs(blocks) == expected
        header = f"pool · {pool['num_blocks']} blocks × {pool['block_size']} slots"
        assert any(row.text.startswith(header) for row in every_row(blocks))
        width = blocks.scrollable_content_region.width
        for row in glyph_rows(blocks):
            groups = row.text.rstrip().split(" ")
            assert row.cell_length == width
            assert all(len(group) == 8 for group in groups[:-1]) and len(groups[-1]) <= 8
        await select(pilot, app, "request-2")  # the reverse-video blocks follow the selection
        theirs = {block["id"] for block in request_view(app, "request-2")["blocks"]}
        assert [reverse for _, reverse in drawn_glyphs(blocks)] == [
            b["id"] in theirs for b in pool["blocks"]
        ]


async def test_the_block_map_scrolls_through_table_pool_strip_and_legend() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        blocks = app.query_one(BlockMap)
        await pilot.press("space", "space")
        await pilot.pause()
        rows = [row.text.rstrip() for row in every_row(blocks)]
        # Table first, then a blank row, the pool strip and its legend, all reachable.
        blank = rows.index("")
        assert rows[0].startswith("request-1") and "round 2" in " ".join(rows[:blank])
        assert rows[blank + 1].startswith("pool ·")
        legend = " ".join(rows[-3:])
        assert all(word in legend for word in ("committed", "free", "a slot × rolled back"))
        assert blocks.show_vertical_scrollbar  # 80x24 cannot hold it all
        assert blocks.max_scroll_y == len(rows) - blocks.scrollable_content_region.height


async def test_one_keypress_is_one_refresh_and_unchanged_panes_are_not_redrawn() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        refreshes = 0
        refresh_view = app.refresh_view

        def counting_refresh_view() -> None:
            nonlocal refreshes
            refreshes += 1
            refresh_view()

        app.refresh_view = counting_refresh_view  # type: ignore[method-assign]
        await pilot.press("space")
        await pilot.pause()
        assert refreshes == 1
        await select(pilot, app, "request-3")  # cancelled by the scenario
        assert refreshes == 1  # moving the cursor redraws the selection panes only
        status = app.query_one(StatusBar).content
        block_table = app.query_one(BlockMap).table
        await pilot.press("f")  # filters the log; nothing the other panes show changes
        await pilot.pause()
        assert app.query_one(BlockMap).table is block_table
        app.action_cancel_request()  # the request already finished: a refresh, no change
        await pilot.pause()
        assert refreshes == 2
        assert app.query_one(StatusBar).content is status
        assert app.query_one(BlockMap).table is block_table


async def test_the_draft_tree_gets_a_scrollbar_only_while_it_overflows() -> None:
    class TreeOnly(App[None]):
        CSS = "DraftTree { height: 5; width: 40; }"

        def compose(self) -> ComposeResult:
            yield DraftTree()

    session = Session(default_scenario())
    app = TreeOnly()
    async with app.run_test(size=(80, 24)) as pilot:
        tree = app.query_one(DraftTree)

        async def show_round() -> None:
            tree.show(View(session.snapshot(), session.log()), "request-1")
            await pilot.pause()

        session.step()
        await show_round()
        assert tree.last_line + 1 <= 5 and not tree.show_vertical_scrollbar
        session.step()  # request-1's second round drafts a bigger tree than 5 rows hold
        await show_round()
        assert tree.last_line + 1 > 5
        assert tree.show_vertical_scrollbar and tree.max_scroll_y == tree.last_line + 1 - 5
        session.undo()
        await show_round()
        assert tree.last_line + 1 <= 5 and not tree.show_vertical_scrollbar


async def test_tab_moves_focus_through_every_pane() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.focused is app.query_one(RequestTable)
        visited = []
        for _ in range(4):
            await pilot.press("tab")
            visited.append(app.focused)
        panes = [app.query_one(BlockMap), app.query_one(DraftTree), app.query_one(CommitLog)]
        assert visited == [*panes, app.query_one(RequestTable)]


async def test_help_opens_and_closes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = "\n".join(shown_lines(app.screen.query_one("#help-keys")))
        for key in ("space", "rollback", "undo", "export", "quit"):
            assert key in keys
        assert "g" in str(app.screen.query_one("#help-guide").content)
        await pilot.press("space")  # debugger keys do not act behind the help screen
        assert app.engine.tick == 0
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")  # closes help, does not quit
        assert not isinstance(app.screen, HelpScreen)
        assert app.is_running


async def test_garbage_collection_waits_until_a_keypress_is_painted() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        collecting_during_step: list[bool] = []
        step = app.session.step

        def recording_step() -> list[dict[str, Any]]:
            collecting_during_step.append(gc.isenabled())
            return step()

        app.session.step = recording_step  # type: ignore[method-assign]
        await pilot.press("space")
        await pilot.pause()
        assert collecting_during_step == [False]  # no collection pauses inside the keypress
        assert gc.isenabled()  # collections resume once the frame is on screen
    assert gc.isenabled()


async def test_garbage_collection_comes_back_when_a_screen_swallows_the_frame() -> None:
    """A screen pushed and popped in the same burst as a step can drop the repaint the pause
    waits for: the collector still comes back on."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(4):
            for key, character in (("space", " "), ("g", "g")):
                app.post_message(events.Key(key, character))
            await asyncio.sleep(0.01)
            app.post_message(events.Key("escape", "\x1b"))
            await pilot.pause(0.2)
            while len(app.screen_stack) > 1:
                await pilot.press("escape")
        await wait_until(
            pilot, lambda: gc.isenabled() and not app.collector.paused, seconds=GC_PAUSE_LIMIT + 2.0
        )
        assert gc.isenabled() and not app.collector.paused
    assert gc.isenabled()


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_clock_key_moves_time_past_the_next_expiry() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        cache = app.session.snapshot()["cache"]
        assert any(entry["state"] == "hot" for entry in cache)
        await pilot.press("t")
        earliest = min(entry["hot_until"] for entry in cache)
        assert app.session.clock.now >= earliest
        assert all(entry["state"] != "hot" for entry in app.session.snapshot()["cache"])
        assert "clock advanced" in log_text(app)


async def test_auto_run_steps_until_the_scenario_ends_and_can_pause() -> None:
    app = make_app()
    app.AUTO_RUN_INTERVAL = 0.01
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: not app.auto_running)
        assert app.session.finished
        assert not any("limit" in m for m in messages(app))  # the end, not the round limit
        assert {op["op"] for op in app.session.operations} == {"step"}
        assert "scenario complete" in str(app.query_one(StatusBar).content)
        assert app.check_action("toggle_run", ()) is None  # nothing left to run

    app = make_app()
    app.AUTO_RUN_INTERVAL = 60.0  # never fires during the test: r starts, r pauses
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert app.auto_running
        assert "auto" in str(app.query_one(StatusBar).content)
        await pilot.press("r")
        assert not app.auto_running
        assert app.engine.tick == 0


async def test_auto_run_waits_under_a_dialog_and_the_header_says_so() -> None:
    session = Session(default_scenario().with_overrides(num_blocks=200))
    session.submit([1, 2, 3], max_tokens=500)  # auto-run cannot finish it during the test
    app = DebuggerApp(session)
    app.AUTO_RUN_INTERVAL = 0.01
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r", "question_mark")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen) and app.auto_running
        tick = app.engine.tick
        await pilot.pause(0.1)
        assert app.engine.tick == tick  # no round while the help is open
        status = app.query_one(StatusBar)
        assert await wait_until(pilot, lambda: "waits for the help" in str(status.content))
        assert app.engine.tick == tick
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.engine.tick > tick)
        header = str(app.query_one(StatusBar).content)
        assert "waits" not in header and ("▶ auto" in header or not app.auto_running)


async def test_command_palette_runs_actions() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        actions = {entry.action for entry in app.palette_actions()}
        assert {"step", "cancel_request", "rollback", "undo", "add_request", "export"} <= actions
        system = [command.title for command in app.get_system_commands(app.screen)]
        assert "Quit" not in system and "quit" in actions  # listed once, with its key
        await pilot.press("ctrl+p")
        await pilot.press(*"Run one engine round")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert app.engine.tick == 1


async def test_whole_scenario_at_80x24_without_errors() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        while app.session.can_step():
            await pilot.press("space", "down")
        await pilot.press("f", "question_mark", "escape", "u", "b", "t")
        await pilot.pause()
        assert app.is_running
        assert app.session.engine.tick >= 9


async def test_screenshot_key_writes_an_svg(tmp_path: Path) -> None:
    app = make_app(export_dir=tmp_path / "out")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "ctrl+s")
        (written,) = (tmp_path / "out").iterdir()
        assert written.name == "default-t0001-screen.svg"
        assert written.read_text(encoding="utf-8").lstrip().startswith("<svg")


async def test_export_failure_is_a_notification(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the export folder should be")
    app = make_app(export_dir=blocker)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.is_running
        assert any(n.severity == "error" for n in app._notifications)
        assert app.check_action("export", ()) is True  # usable again


async def test_guide_key_opens_the_guide_and_owns_the_keys() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        assert type(app.screen).__name__ == "GuideScreen"
        await pilot.press("space", "c")
        assert app.engine.tick == 0
        await pilot.press("escape")
        assert app.screen is app.screen_stack[0]


async def test_the_export_notice_names_its_folder_once_and_fits_a_small_screen(
    tmp_path: Path,
) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "e")
        await wait_until(pilot, lambda: any(n.title == "Exported" for n in app._notifications))
        (exported,) = [n for n in app._notifications if n.title == "Exported"]
        written = sorted(p.name for p in tmp_path.iterdir())
        heading, names = exported.message.split("\n")
        assert heading == f"Wrote {len(written)} files in {tmp_path}/:"
        stem, endings = names.removesuffix("}").split(".{")
        assert sorted(f"{stem}.{ending}" for ending in endings.split(", ")) == written


@pytest.mark.parametrize("size", [(80, 24), (150, 40)])
async def test_the_export_toast_breaks_its_file_list_between_names(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    # Issue 26: at 150 columns the toast read "trace.json,per" / "fetto.json}".
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.press("space", "e")
        await wait_until(pilot, lambda: any(n.title == "Exported" for n in app._notifications))
        await pilot.pause()
        (toast,) = [t for t in app.screen.query(Toast) if "Wrote" in str(t.render())]
        drawn = [strip.text for strip in toast.render_lines(toast.region.reset_offset)]
        endings = [p.name.split(".", 1)[1] for p in tmp_path.iterdir()]
        for ending in endings:
            assert any(re.search(rf"[{{ ]{re.escape(ending)}[,}}]", line) for line in drawn), (
                ending,
                drawn,
            )


@pytest.mark.parametrize("tampered", [False, True])
async def test_exporting_a_diverged_trace_says_the_files_differ_from_it(
    tmp_path: Path, tampered: bool
) -> None:
    from deepinfer_tui.replay import Replay, parse_trace, trace_data

    recorded = Session(default_scenario())
    for _ in range(2):
        recorded.step()
    data = trace_data(recorded)
    if tampered:
        commit = next(e for e in data["events"] if e["kind"] == "commit")
        commit["tokens"] = [31, 31, 31]
    replay = Replay(parse_trace(data))
    app = DebuggerApp(replay.session, replay=replay, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e")
        await wait_until(pilot, lambda: any(n.title == "Exported" for n in app._notifications))
        (exported,) = [n for n in app._notifications if n.title == "Exported"]
        assert ("differs from the recorded trace" in exported.message) is tampered
        assert (exported.severity == "warning") is tampered
        assert len(list(tmp_path.iterdir())) == 5


async def test_replay_is_read_only_and_steps_through_frames() -> None:
    from deepinfer_tui.replay import Replay, parse_trace, trace_data

    recorded = Session(default_scenario())
    for _ in range(3):
        recorded.step()
    # Cancel a request that is still active at this point of the scenario.
    active = [r["id"] for r in recorded.snapshot()["requests"] if r["status"] != "finished"]
    cancelled = active[0]
    recorded.cancel(cancelled)
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        status = str(app.query_one(StatusBar).content)
        assert "replay" in status and "frame 1/5" in status
        for action in ("step", "cancel_request", "rollback", "undo", "add_request", "toggle_run"):
            assert app.check_action(action, ()) is False
        assert app.check_action("frame_back", ()) is None
        await pilot.press("space", "n")
        assert replay.position == 2
        shown = len(replay.current.snapshot["requests"][0]["generated"])
        assert cell(app, "request-1", "tokens") == f"{shown}/8"
        await pilot.press("u")
        assert replay.position == 1
        await pilot.press("space", "space", "space", "space")
        assert replay.position == 4
        assert app.check_action("frame_forward", ()) is None
        assert cell(app, cancelled, "finish") == "cancelled"
        await pilot.press("backspace")
        assert replay.position == 3
        assert cell(app, cancelled, "finish") == ""
        # Mutating keys do nothing to the engine being replayed.
        tick = app.engine.tick
        await pilot.press("c", "b", "a", "t", "r")
        assert app.engine.tick == tick and replay.position == 3
        assert isinstance(app.screen, type(app.screen_stack[0]))
        # Five refusals, one toast: a repeated notice replaces the one on screen.
        said = [n.message for n in app._notifications]
        read_only = "a saved trace is read-only: this key acts in a live session"
        assert said[-1] == read_only and said.count(read_only) == 1
        await pilot.press("space")  # to the last frame: one more says so
        await pilot.press("space")
        assert [n.message for n in app._notifications][-1] == "this is the last frame"


async def test_an_engine_refusal_becomes_a_notification() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        # The keys are dimmed when the engine would refuse; the palette path checks too, but
        # an action invoked anyway must still end in a notification, not a crash.
        app.action_undo()
        await pilot.pause()
        assert app.is_running and app.engine.tick == 0
        (notification,) = app._notifications
        assert notification.severity == "error" and "undo" in notification.message


async def test_without_colour_every_state_still_reads_from_its_symbol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NO_COLOR: each request's row shows its state's symbol and word, and the block states
    a person must tell apart have different symbols."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.no_color
        await pilot.press("space", "space", "space")
        await pilot.pause()
        table = app.query_one(RequestTable)
        rows = ["".join(s.text for s in line) for line in drawn_table(table)]
        requests = app.session.snapshot()["requests"]
        assert {r["status"] for r in requests} >= {"running", "finished"}
        for request in requests:
            state = request["finish_reason"] or request["status"]
            row = next(row for row in rows if request["id"] in row)
            assert STATUS_MARKS[state].symbol in row, (state, row)
        block_symbols = [mark.symbol for mark in BLOCK_MARKS.values()]
        assert len(set(block_symbols)) == len(block_symbols)


async def test_cancelling_the_only_request_lets_the_scenario_go_on() -> None:
    """At tick 0 the scenario has submitted one request; cancelling it leaves nothing to step,
    so the scenario's next events arrive at once and space steps them."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, app, "request-1")
        await pilot.press("c")
        assert "request-2" in {r["id"] for r in app.session.snapshot()["requests"]}
        await pilot.press("space")
        assert app.session.engine.tick == 1
        await pilot.press("r")  # runs the rest of the scenario
        assert await wait_until(pilot, lambda: app.session.finished, seconds=10)
        assert "scenario complete" in str(app.query_one(StatusBar).render())


async def test_space_steps_whichever_pane_has_focus() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            await pilot.press("space")
        for pane in (BlockMap, DraftTree, CommitLog, RequestTable):
            app.query_one(pane).focus()
            await pilot.pause()
            tick = app.session.engine.tick
            await pilot.press("space")
            assert app.session.engine.tick == tick + 1, pane.__name__
        assert app.query_one(DraftTree).root.is_expanded  # space never toggles the tree


async def test_the_headers_block_counts_add_up_to_the_pool() -> None:
    """Held, cached, undo-retained and free blocks are a partition of the pool."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        seen = set()
        for _ in range(40):
            await pilot.press("space")
            header = str(app.query_one(StatusBar).render())
            found = re.search(
                r"█(\d+) held ▒(\d+) cached (?:░(\d+) retained )?·(\d+) free of (\d+)", header
            )
            assert found, header
            held, cached, undo, free, total = (int(g or 0) for g in found.groups())
            assert held + cached + undo + free == total
            blocks = app.session.snapshot()["metrics"]["blocks"]
            assert (cached, undo, free) == (blocks["cached"], blocks["retained"], blocks["free"])
            seen.add((held > 0, cached > 0))
            if app.session.finished:
                break
        assert (True, True) in seen  # requests and the cache both held blocks at some point


@pytest.mark.parametrize(
    ("width", "hidden"),
    [
        (160, set()),
        (120, {"filter_log", "guide"}),
        (90, {"filter_log", "export", "guide", "advance_clock"}),
        (60, {"toggle_run", "rollback"}),
    ],
)
async def test_the_footer_keeps_help_and_quit_in_view_as_the_terminal_narrows(
    width: int, hidden: set[str]
) -> None:
    app = make_app()

    def shown() -> dict[str, Any]:
        keys = app.query_one("#footer").query("FooterKey")
        return {key.action: key.region for key in keys if key.display and key.region.width}

    async with app.run_test(size=(width, 24)) as pilot:
        # The footer fits its keys to the width once it is laid out: wait for that (a
        # loaded machine may draw the first frame before it).
        await wait_until(pilot, lambda: {"help", "quit", "step"} <= set(shown()))
        await pilot.pause()
        assert {"help", "quit", "step"} <= set(shown())
        assert not hidden & set(shown())
        right = max(region.right for region in shown().values())
        assert right <= width  # nothing cut at the edge
        await pilot.press("space", "b")  # a hidden key still works
        await wait_until(pilot, lambda: app.session.operations[-1]["op"] == "rollback")
        assert app.session.operations[-1]["op"] == "rollback"


async def test_keys_in_one_burst_act_on_the_row_the_cursor_moved_to() -> None:
    """An arrow key and an action key arriving in one terminal read: the action must take the
    cursor's row, not the row whose highlight message is still queued behind the keys."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        await select(pilot, app, "request-1")
        for key, character in (("down", None), ("c", "c")):
            app.post_message(events.Key(key, character))
        await wait_until(pilot, lambda: app.session.operations[-1]["op"] == "cancel")
        await pilot.pause()  # the panes follow the cancel
        assert app.session.operations[-1] == {"op": "cancel", "id": "request-2"}
        assert request_view(app, "request-1")["finish_reason"] is None
        assert app.query_one(BlockMap).border_title == "KV blocks · request-2"


async def test_brackets_in_a_request_id_show_as_text(tmp_path: Path) -> None:
    """Ids and scenario names reach border titles, notifications and exports: never markup."""
    scenario = parse_scenario(
        {
            "name": "[/]odd",
            # Upper case too: Textual's escape() leaves tags such as [B] alone.
            "events": [{"tick": 0, "submit": {"id": "[/]x[B]", "prompt": [1, 2], "max_tokens": 3}}],
        }
    )
    app = DebuggerApp(Session(scenario), export_dir=tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("space", "f")
        await pilot.pause()
        drawn = app.export_screenshot().replace("&#160;", " ")
        for title in (
            "KV blocks · [/]x[B]",
            "Commit log · only [/]x[B] · ",
            "Draft tree · [/]x[B] · round 1",
        ):
            assert title in drawn
        await pilot.press("e", "ctrl+s")
        await wait_until(pilot, lambda: not app._exporting)  # the export worker has ended
        await pilot.pause()
        assert all(n.severity != "error" for n in app._notifications)
        assert len(list(tmp_path.iterdir())) == 6  # five export files and the screenshot


async def test_quitting_during_an_export_waits_for_its_files(tmp_path: Path) -> None:
    app = DebuggerApp(Session(default_scenario()), export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        for key in ("e", "q"):  # one burst: q arrives while the export is being written
            app.post_message(events.Key(key, key))
        assert await wait_until(pilot, lambda: not app.is_running)
    assert len(list(tmp_path.iterdir())) == 5


async def test_enter_twice_in_the_palette_runs_the_command_once() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        await pilot.press("ctrl+p", *"undo")
        assert await wait_until(pilot, lambda: palette_listed(app))
        for _ in range(2):  # one burst: the second arrives while the palette is closing
            app.post_message(events.Key("enter", "\r"))
        # The undo runs once the palette has closed; then a moment for a second one to show.
        assert await wait_until(pilot, lambda: app.session.engine.tick <= 1)
        await pilot.pause(0.3)
        assert len(app.screen_stack) == 1
        assert app.session.engine.tick == 1  # one undo
        await pilot.press("space")
        assert app.session.engine.tick == 2  # and the app goes on


async def test_the_palette_over_a_dialog_lists_debugger_actions_as_unavailable() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.action_available("step")
        await pilot.press("a")  # the add dialog
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: palette_listed(app))
        assert isinstance(app.screen, CommandPalette)
        assert not app.action_available("step")  # listed "(not available now)"
        await pilot.press("escape", "escape")
        await wait_until(pilot, lambda: app.action_available("step"))
        assert app.action_available("step")


class TwoTables(App[None]):
    """Textual's DataTable beside the request table's RowTable, with the same rows."""

    def compose(self) -> ComposeResult:
        yield DataTable(zebra_stripes=True, cursor_type="row", id="data-table")
        yield row_table.RowTable(id="row-table")

    def on_mount(self) -> None:
        data = self.query_one(DataTable)
        data.add_columns("a", "b")
        rows = self.query_one(row_table.RowTable)
        rows.set_columns([("a", "a"), ("b", "b")])
        for i in range(3):
            data.add_row(f"r{i}", "x")
        rows.set_rows([(f"r{i}", ((f"r{i}", ""), ("x", ""))) for i in range(3)])


def line_colours(table: Widget) -> list[tuple[object, object, bool]]:
    """Each of the first four lines' first cell: background, foreground, bold."""
    colours = []
    for strip in table.render_lines(Region(0, 0, table.outer_size.width, 4)):
        style = next(segment for segment in strip if segment.text.strip()).style
        colours.append((style.bgcolor, style.color, bool(style.bold)))
    return colours


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_the_row_table_has_the_colours_of_textuals_data_table(theme: str) -> None:
    # Header, cursor and stripes, focused and not: the theme's translucent colours (the
    # blurred cursor is $primary at 30%) blended as DataTable blends them.
    app = TwoTables()
    async with app.run_test(size=(40, 12)) as pilot:
        app.theme = theme
        data, rows = app.query_one(DataTable), app.query_one(row_table.RowTable)

        async def settled() -> list[list[tuple[object, object, bool]]]:
            # A theme or focus change restyles on later messages: read once two reads agree.
            before: list[list[tuple[object, object, bool]]] | None = None
            for _ in range(50):
                await pilot.pause()
                now = [line_colours(data), line_colours(rows)]
                if now == before:
                    break
                before = now
            return now

        data.focus()
        data_focused, rows_blurred = await settled()
        rows.focus()
        data_blurred, rows_focused = await settled()
        assert rows_focused == data_focused
        assert rows_blurred == data_blurred
        assert rows_focused[1][0] != rows_blurred[1][0]  # the cursor row tells focus apart
