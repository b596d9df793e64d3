"""Key 2 shows the prefix cache of the policy in use in the view area (issue 24)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.helpers import shown_lines
from tests.app.tour import WIDE, select


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("ttl", "ttl cache: 3 entries"),
        ("blocks", "free queue "),
        ("radix", "└─○ [1 2 3 4] (4) #0"),  # request-1's prompt [1 2 3 4], inserted at t1
    ],
)
async def test_key_2_shows_the_cache_of_the_policy_in_use(policy: str, expected: str) -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(cache_policy=policy)))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            await pilot.press("space")
        await pilot.press("2")
        await pilot.pause()
        pane = app.query_one("#cache")
        assert pane.display and not app.query_one("#tree").display
        assert pane.border_title == f"Prefix cache · {policy}"
        lines = shown_lines(pane)
        assert any(expected in line for line in lines), lines
        await pilot.press("1")
        await pilot.pause()
        assert app.query_one("#tree").display and not pane.display


async def test_the_blocks_view_follows_the_selected_request() -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(cache_policy="blocks")))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2):  # request-2 has hit request-1's first block
            await pilot.press("space")
        await pilot.press("2")
        await pilot.pause()
        pane = app.query_one("#cache")
        assert any("request-1: restore cold, hit nothing" in line for line in shown_lines(pane))
        await pilot.press("down")
        await pilot.pause()
        lines = shown_lines(pane)
        assert any("request-2: restore hot, hit #0" in line for line in lines), lines
        assert any("│ ✓ #0 " in line for line in lines), lines


async def a_hit_under_blocks(pilot: Pilot[None]) -> None:
    """Two rounds in, request-2 (running on request-1's first block, hit) is selected, key 2."""
    for _ in range(2):
        await pilot.press("space")
    await select(pilot, "request-2")
    await pilot.press("2")


def test_snapshot_of_the_blocks_view(snap_compare: Any) -> None:
    scenario = default_scenario().with_overrides(cache_policy="blocks")
    app = DebuggerApp(Session(scenario))
    assert snap_compare(app, terminal_size=WIDE, run_before=a_hit_under_blocks)


async def test_the_help_screen_lists_key_2_and_the_views_marks() -> None:
    app = DebuggerApp(Session(default_scenario()))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("question_mark")
        keys = "\n".join(shown_lines(app.screen.query_one("#help-keys")))
        assert any(
            line.strip().startswith("2") and "prefix cache" in line for line in keys.split("\n")
        )
        legend = str(app.screen.query_one("#help-legend").content)
        assert "Prefix cache (key 2)" in legend
        for words in ("free queue: a cached block", "radix node the selected request matched"):
            assert words in legend
