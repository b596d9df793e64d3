"""Keys 3 and 5 show the timeline and the metrics in the view area (issue 25)."""

from __future__ import annotations

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.timeline_view import round_at
from tests.app.helpers import shown_lines


def crowded_app() -> DebuggerApp:
    return DebuggerApp(Session(default_scenario().with_overrides(token_budget=4)))


async def test_key_3_shows_the_timeline_and_it_follows_the_rounds() -> None:
    app = crowded_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space", "3")
        await pilot.pause()
        pane = app.query_one("#timeline")
        assert pane.display and not app.query_one("#tree").display
        lines = shown_lines(pane)
        assert any("▒ prefilling" in line for line in lines)  # the legend
        assert pane.border_title == "Timeline · t2"
        selected = app.selected_id
        assert selected is not None
        # request-1 came with the scenario: its whole 4-token prompt in round 1, then a token.
        assert selected == "request-1"
        assert any(line.startswith("│ request-1 ▒█") for line in lines)
        assert any(line.rstrip().endswith("·▼") for line in lines)  # the current round
        await pilot.press("space")
        await pilot.pause()
        assert pane.border_title == "Timeline · t3"
        assert any("rounds 1-3 · 3 requests" in line for line in shown_lines(pane))


async def test_key_5_shows_the_metrics_of_the_selected_request() -> None:
    app = crowded_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(6):
            await pilot.press("space")
        await pilot.press("5")
        await pilot.pause()
        pane = app.query_one("#metrics")
        assert pane.display and not app.query_one("#timeline").display
        lines = shown_lines(pane.query_one("#metrics-lines"))  # inside the scrolling pane
        assert lines[0].startswith("ms · all 0: the clock stood still")  # the default scenario's
        assert any(line.split()[:2] == ["id", "ttft"] for line in lines)
        assert any(line.startswith("prefix hits:") for line in lines)
        assert any(line.startswith("ITL request-1 ") for line in lines)  # its sparkline
        assert pane.border_title == "Metrics · t6"
        await pilot.press("1")
        await pilot.pause()
        assert app.query_one("#tree").display and not pane.display


async def test_the_focused_timeline_scrolls_to_older_rounds_and_back() -> None:
    session = Session(default_scenario().with_overrides(num_blocks=200))
    session.submit([1, 2, 3], max_tokens=500)
    for _ in range(60):
        session.step()
    app = DebuggerApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await pilot.click("#timeline")  # focus it: the arrows are its keys then
        pane = app.query_one("#timeline")

        def footer() -> str:
            return next(line for line in shown_lines(pane) if "rounds " in line)

        newest = footer()
        assert "-60 ·" in newest and "← →" in newest
        await pilot.press("left")
        assert "-55 ·" in footer()  # five rounds older
        await pilot.press("home")
        assert "rounds 1-" in footer()
        await pilot.press("end")
        assert footer() == newest


async def test_a_click_on_a_rounds_column_moves_the_debugger_there() -> None:
    app = crowded_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space", "space", "space", "3")
        await pilot.pause()
        pane = app.query_one("#timeline")
        inset_x = pane.content_region.x - pane.region.x
        inset_y = pane.content_region.y - pane.region.y
        names = len("request-1")  # the column of round r: after the names and a space
        await pilot.click("#timeline", offset=(inset_x + names + 1 + (2 - 1), inset_y + 4))
        await pilot.pause()
        assert app.engine.tick == 2  # back through undo, as G 2 would
        assert pane.border_title == "Timeline · t2"
        await pilot.click("#timeline", offset=(inset_x + 2, inset_y + 4))  # a name: no round
        await pilot.pause()
        assert app.engine.tick == 2


def test_round_at_maps_cells_to_the_rounds_drawn_and_nothing_else() -> None:
    session = Session(default_scenario().with_overrides(token_budget=4))
    for _ in range(5):
        session.step()
    log, tick = session.log(), session.engine.tick
    names = len("request-1")
    assert [round_at(log, tick, 60, names + 1 + i) for i in range(5)] == [1, 2, 3, 4, 5]
    assert round_at(log, tick, 60, 3) is None  # inside the names
    assert round_at(log, tick, 60, names + 1 + 5) is None  # past the current round
    # Scrolled back 2 rounds in a pane with room for 3 columns: rounds 1-3 are drawn.
    assert round_at(log, tick, names + 1 + 3, names + 1, back=2) == 1
    assert round_at(log, 0, 60, names + 1) is None  # nothing has run
