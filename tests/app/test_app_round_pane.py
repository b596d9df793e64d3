"""Key 4 shows the last round's token budget in the view area; key 1 the draft tree again."""

from __future__ import annotations

import re

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.helpers import shown_lines


async def test_key_4_shows_the_round_and_key_1_the_tree() -> None:
    scenario = default_scenario().with_overrides(token_budget=6)
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")
        await pilot.press("4")
        await pilot.pause()
        pane, tree = app.query_one("#round"), app.query_one("#tree")
        assert pane.display and not tree.display
        lines = shown_lines(pane)
        assert any("prefill" in line and "decode" in line for line in lines)  # the legend
        assert any("rows of the token budget 6" in line for line in lines)
        assert pane.border_title == "Round · t1"
        await pilot.press("space")
        await pilot.pause()
        assert app.query_one("#round").border_title == "Round · t2"  # follows the rounds
        await pilot.press("1")
        await pilot.pause()
        assert app.query_one("#tree").display and not app.query_one("#round").display


async def test_the_header_shows_the_budget_the_round_used() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(token_budget=5)))
    async with app.run_test(size=(120, 40)) as pilot:
        header = "\n".join(shown_lines(app.query_one("#status")))
        assert "budget" not in header  # no round has run
        await pilot.press("space")
        await pilot.pause()
        header = "\n".join(shown_lines(app.query_one("#status")))
        assert "budget 4/5" in header  # request-1's 4 prompt rows of the budget of 5


async def test_the_header_groups_the_budget_as_the_round_view_does() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(token_budget=2048)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "4")
        await pilot.pause()
        header = "\n".join(shown_lines(app.query_one("#status")))
        assert "budget 4/2,048" in header
        assert any(
            "of the token budget 2,048" in line for line in shown_lines(app.query_one("#round"))
        )


async def test_no_legend_entry_of_the_round_is_split_between_two_lines() -> None:
    # Issue 26: the round's legend broke '░' from 'draft' and 'a cell is' from 'a row'.
    for width in (64, 70, 76, 110, 120):
        app = DebuggerApp(Session(default_scenario()))
        async with app.run_test(size=(width, 40)) as pilot:
            await pilot.press("space", "space", "4")
            await pilot.pause()
            pane = app.query_one("#round")
            lines = [strip.text for strip in pane.render_lines(pane.region.reset_offset)]
            for entry in ("█ prefill", "▓ decode", "░ draft", "· a cell is"):
                assert any(entry in line for line in lines), (width, entry, lines)
            assert any(re.search(r"a cell is (a row|[\d.]+ rows)", line) for line in lines), lines
