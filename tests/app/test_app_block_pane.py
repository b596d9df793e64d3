"""The block pane of a request that holds no blocks: reopened by a rollback, asked for zero
tokens, or deferred by a small pool."""

from __future__ import annotations

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap
from tests.app import tour
from tests.app.helpers import (
    generated,
    looks,
    make_app,
)
from tests.app.test_perfetto_intervals import CROWDED

SIZE = (120, 40)


def block_lines(app: DebuggerApp) -> list[str]:
    return str(app.query_one(BlockMap).table).splitlines()


async def test_a_request_reopened_by_rollback_shows_no_stale_restore_line() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        while generated(app, "request-1") < 8:  # request-1 finishes (max 8 tokens)
            await pilot.press("space")
        assert any(line.startswith("restore ") for line in block_lines(app))
        await pilot.press("b")
        lines = block_lines(app)
        assert not any(line.startswith("restore ") for line in lines), lines
        assert any(line.startswith("queued: no KV blocks yet") for line in lines), lines
        await pilot.press("space")  # admitted again: the restore of this admission
        assert any(line.startswith("restore ") for line in block_lines(app))


async def test_a_request_for_zero_tokens_shows_the_prompt_rows_it_computed() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a", *"5,6,7", "tab", "ctrl+a", "ctrl+k", "0", "enter", "space")
        (added,) = [r for r in app.session.snapshot()["requests"] if r["prompt"] == [5, 6, 7]]
        assert added["status"] == "finished" and app.selected_id == added["id"]
        (restore,) = [line for line in block_lines(app) if line.startswith("restore ")]
        assert ": reused 0, computed 3 " in restore  # it warms the cache with its prompt


async def test_a_deferred_running_request_is_not_called_finished() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(num_blocks=12)))
    async with app.run_test(size=SIZE) as pilot:

        def deferred() -> str | None:
            for r in app.session.snapshot()["requests"]:
                if r["status"] == "running" and not r["blocks"]:
                    return str(r["id"])
            return None

        while deferred() is None and app.session.can_step():
            await pilot.press("space")
        request_id = deferred()
        assert request_id is not None, "the small pool defers a request"
        await tour.select(pilot, request_id)
        lines = block_lines(app)
        snapshot = app.session.snapshot()
        (deferral,) = [
            e
            for e in app.session.log()
            if e["kind"] == "deferred"
            and e["request_id"] == request_id
            and e["tick"] == snapshot["tick"]
        ]
        needed = deferral["reason"].split(" ")[1]  # "needs 3 free blocks; ..."
        free = snapshot["metrics"]["blocks"]["free"]
        noun = "block" if needed == "1" else "blocks"
        # It says once what it waits for: the free blocks the deferral named, and how many are.
        assert f"waiting: no KV blocks yet (needs {needed} free {noun}, {free} free)" in lines
        assert "free block" not in lines[0], lines[0]
        # It has computed none of the rows its restore planned.
        (restore,) = [line for line in lines if line.startswith("restore ")]
        assert ", computed 0 of " in restore, restore
        assert not any(line.startswith("finished") for line in lines), lines


async def test_a_preempted_request_says_it_was_preempted_not_queued() -> None:
    app = DebuggerApp(Session(parse_scenario(CROWDED)))
    async with app.run_test(size=SIZE) as pilot:
        while not any(e["kind"] == "preempt" for e in app.session.log()):
            await pilot.press("space")
        await tour.select(pilot, "c")
        lines = block_lines(app)
        assert lines[1].startswith("preempted (1 time): gave its KV blocks back"), lines
        assert not any(line.startswith("queued") for line in lines), lines


@pytest.mark.parametrize(
    ("size", "block_size"), [(SIZE, 4), ((80, 24), 4), ((160, 50), 16), ((100, 30), 10)]
)
async def test_lines_drawn_directly_look_as_textual_draws_them(
    size: tuple[int, int], block_size: int
) -> None:
    # BlockMap draws a line from Rich's segments, wrapped by Rich if it is too long; with
    # direct_lines off every line goes through Textual's Content. Screen after screen, at
    # widths that wrap many lines (160x50 leaves the map 39 cells), both draw the same cells.
    app = DebuggerApp(Session(default_scenario().with_overrides(block_size=block_size)))
    async with app.run_test(size=size) as pilot:
        block_map = app.query_one(BlockMap)
        for _ in range(8):
            await pilot.press("space", "down")
            await pilot.pause()
            height = block_map.scrollable_content_region.height
            direct = [looks(block_map.render_line(y)) for y in range(height)]
            block_map.direct_lines = False
            block_map.notify_style_update()  # forgets every line drawn so far
            assert [looks(block_map.render_line(y)) for y in range(height)] == direct
            block_map.direct_lines = True
            block_map.notify_style_update()


async def test_a_dropped_block_wraps_its_slots_under_its_first_row() -> None:
    # Blocks of 10 slots: eight on a block's first line, two on the next, under the first
    # slot. In round 3 request-2's draft wrote into a new block the target rejected.
    app = DebuggerApp(Session(default_scenario().with_overrides(block_size=10)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space")
        (dropping,) = [r for r in app.session.snapshot()["requests"] if r["dropped_blocks"]]
        await tour.select(pilot, dropping["id"])
        lines = block_lines(app)
        block = f"#{dropping['dropped_blocks'][0]} "
        (first,) = [i for i, line in enumerate(lines) if line.startswith(block)]
        head, rest = lines[first], lines[first + 1]
        assert head.count("×") == 8 and head.rstrip().endswith("×")
        assert rest.index("×") == head.index("×")  # the second row's slots under the first's
        assert rest.strip() == "×   × ] ref 0 × dropped (rolled back this round)"
