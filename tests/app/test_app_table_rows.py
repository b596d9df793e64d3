"""A request table that gains a row each round: the screen is laid out again only when the
table's box or scrollbar must change; otherwise its scroll range grows in place."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from textual.pilot import Pilot

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap, RequestTable
from tests.app.helpers import wait_until

REQUESTS = 40


def submits_app(
    events: list[dict[str, Any]], max_active: int, block_size: int = 16, num_blocks: int = 400
) -> DebuggerApp:
    """The debugger on the built-in scenario's model with these scenario events."""
    document = {
        "schema": 1,
        "name": "table rows",
        "description": "requests for the table's tests",
        "seed": 7,
        "model": {"vocab_size": 32, "width": 16, "depth": 3, "window": 4},
        "config": {"max_active": max_active, "block_size": block_size, "num_blocks": num_blocks},
        "events": events,
    }
    return DebuggerApp(Session(parse_scenario(document, "test scenario")))


def one_arrival_per_round() -> DebuggerApp:
    """Requests that arrive one per round and run long: none finishes during a test."""
    submit = {"prompt": [1, 2, 3], "max_tokens": 200}
    events = [{"tick": t, "submit": {"id": f"r{t + 1}", **submit}} for t in range(REQUESTS)]
    return submits_app(events, max_active=8)


def cursor_in_view(table: RequestTable) -> bool:
    top = round(table.scroll_offset.y)
    rows = table.scrollable_content_region.height - table.header_height
    return top <= table.cursor_row < top + rows


async def press_counting_layouts(app: DebuggerApp, pilot: Pilot[Any]) -> int:
    """Press space; how many times the screen was laid out before the frame settled."""
    layouts: list[object] = []
    signal = app.screen.screen_layout_refresh_signal
    signal.subscribe(app, layouts.append, immediate=True)
    try:
        await pilot.press("space")
        await pilot.pause()
        await pilot.pause()  # a layout asked for while the frame settled is counted too
    finally:
        signal.unsubscribe(app)
    return len(layouts)


def assert_scroll_range_fits_rows(table: RequestTable) -> None:
    height = table.row_count + table.header_height
    assert table.virtual_size.height == height
    if table.show_vertical_scrollbar:
        assert table.vertical_scrollbar.window_virtual_size == height
    assert table.max_scroll_y == max(0, height - table.scrollable_content_region.height)


async def test_a_new_row_in_a_table_of_fixed_height_lays_nothing_out() -> None:
    app = one_arrival_per_round()
    async with app.run_test(size=(160, 40)) as pilot:  # wide: the table is as tall as its pane
        table = app.query_one(RequestTable)
        for _ in range(3):  # past the first rounds' changes of keys and panes
            await pilot.press("space")
        await pilot.pause()
        room = table.scrollable_content_region.height
        fitting = overflowing = 0
        while table.row_count < REQUESTS:
            rows, box = table.row_count, table.region
            layouts = await press_counting_layouts(app, pilot)
            assert table.row_count == rows + 1
            assert_scroll_range_fits_rows(table)
            # Its scrollbar is always there: the row that overflows the pane brings none.
            assert table.show_vertical_scrollbar
            assert table.region == box
            assert layouts == 0, f"row {table.row_count} laid the screen out"
            if table.row_count + table.header_height > room:
                overflowing += 1
            else:
                fitting += 1
        assert fitting and overflowing  # rows that fit and rows past the pane were both added
        table.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert table.scroll_y == table.max_scroll_y > 0  # the newest row can be scrolled to


async def test_a_block_table_growing_past_its_pane_lays_nothing_out() -> None:
    # Four-slot blocks and a small pool: the request's block table outgrows its pane within
    # a few rounds, then folds its runs of alike blocks and fits again.
    events = [{"tick": 0, "submit": {"id": "r1", "prompt": [1, 2], "max_tokens": 80}}]
    app = submits_app(events, max_active=2, block_size=4, num_blocks=64)
    async with app.run_test(size=(160, 50)) as pilot:
        blocks = app.query_one(BlockMap)

        def overflows() -> bool:
            return blocks.virtual_size.height > blocks.scrollable_content_region.height

        for _ in range(3):  # past the first rounds' changes of keys and panes
            await pilot.press("space")
        await pilot.pause()
        seen = [overflows()]
        for _ in range(10):
            assert await press_counting_layouts(app, pilot) == 0
            assert blocks.show_vertical_scrollbar  # always there: no line brings it
            seen.append(overflows())
        assert (False, True) in pairwise(seen)  # it grew past the pane
        assert (True, False) in pairwise(seen)  # and came back within it


async def test_a_table_of_auto_height_still_grows_with_its_rows_up_to_its_cap() -> None:
    app = one_arrival_per_round()
    async with app.run_test(size=(120, 40)) as pilot:  # narrow: the table's height follows
        table = app.query_one(RequestTable)
        heights = []
        while table.row_count < 20:
            await pilot.press("space")
            await pilot.pause()
            assert_scroll_range_fits_rows(table)
            heights.append(table.outer_size.height)
        cap = max(heights)
        grown = heights[: heights.index(cap) + 1]
        assert grown == sorted(grown) and len(set(grown)) > 3  # one line per row, then
        assert set(heights[heights.index(cap) :]) == {cap}  # no more: it scrolls instead
        assert table.show_vertical_scrollbar


async def test_rows_drawn_round_by_round_equal_the_table_drawn_at_once() -> None:
    stepped = one_arrival_per_round()
    async with stepped.run_test(size=(160, 40)) as pilot:
        for _ in range(8):  # each adds a row below the others and repaints only what changed
            await pilot.press("space")
        await pilot.pause()
        by_rounds = stepped.export_screenshot()
        tick = stepped.engine.tick
    at_once = one_arrival_per_round()
    for _ in range(tick):
        at_once.session.step()
    async with at_once.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        assert at_once.export_screenshot() == by_rounds


async def test_a_sort_keeps_the_selected_request_selected_and_in_view() -> None:
    # Prompts grow with arrival: sorted by prompt length (longest first), the first request
    # goes from the top row to the bottom one, and the table follows it there.
    submits = [{"id": f"r{n}", "prompt": [1] * n, "max_tokens": 50} for n in range(1, 15)]
    app = submits_app([{"tick": 0, "submit": submit} for submit in submits], max_active=16)
    async with app.run_test(size=(80, 24)) as pilot:  # the table shows a few of 14 rows
        await pilot.press("space")
        table = app.query_one(RequestTable)
        table.focus()
        await pilot.press("ctrl+home")
        await pilot.pause()
        assert app.selected_id == "r1" and round(table.scroll_offset.y) == 0
        await pilot.press("o")  # by prompt length: r1 is last now
        await pilot.pause()
        assert "by prompt" in str(table.border_title)
        assert app.selected_id == "r1" and table.get_row_index("r1") == table.row_count - 1
        await wait_until(pilot, lambda: cursor_in_view(table))  # the scroll follows a refresh
        assert cursor_in_view(table), (table.cursor_row, table.scroll_offset.y)  # on screen


async def test_a_request_added_as_the_scrollbar_appears_is_selected_in_view() -> None:
    # 18 rows fill the wide pane; the added one brings the scrollbar, which needs a layout
    # before the table can scroll: the selection must still end up on screen.
    app = one_arrival_per_round()
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(RequestTable)
        for _ in range(17):
            await pilot.press("space")
        await pilot.press("a", *"7,8,9", "tab", "ctrl+a", "ctrl+k", "3", "enter")
        await wait_until(pilot, lambda: app.selected_id == "user-1" and cursor_in_view(table))
        assert app.selected_id == "user-1"
        assert cursor_in_view(table), (table.cursor_row, table.scroll_offset.y)


async def test_a_shorter_pane_keeps_the_cursor_row_on_screen() -> None:
    submits = [{"id": f"r{n}", "prompt": [1, 2], "max_tokens": 50} for n in range(1, 31)]
    app = submits_app([{"tick": 0, "submit": submit} for submit in submits], max_active=32)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("space")
        table = app.query_one(RequestTable)
        table.focus()
        rows = table.scrollable_content_region.height - table.header_height
        for _ in range(rows - 1):  # to the last row on screen
            await pilot.press("down")
        await pilot.pause()
        assert cursor_in_view(table) and round(table.scroll_offset.y) == 0
        selected = app.selected_id
        await pilot.resize_terminal(120, 30)  # the table loses rows at its bottom
        await wait_until(pilot, lambda: cursor_in_view(table))
        assert app.selected_id == selected
        assert cursor_in_view(table), (table.cursor_row, table.scroll_offset.y)
