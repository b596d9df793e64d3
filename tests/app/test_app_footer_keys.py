"""The footer shows the view keys 1-6 side by side under "views" at every width, with help and
quit, nothing overlapping; the help lists every view key, auto-run's speed keys and a
replay's Home and End."""

from __future__ import annotations

from itertools import pairwise

import pytest
from textual.widgets import Static

from deepinfer_tui.app import DebuggerApp
from tests.app.helpers import make_app, plain, wait_until
from tests.app.test_app_diff_pane import replay_app

VIEW_KEYS = ["1", "2", "3", "4", "5", "6"]


def footer_items(app: DebuggerApp) -> list[tuple[str, int, int]]:
    """(text, x, right) of each footer key and label drawn on the bottom row, left to right."""
    bottom = app.screen.size.height - 1
    items = []
    for widget in app.query_one("#footer").query("FooterKey, FooterLabel"):
        region = widget.region
        if widget.display and region.width and region.y == bottom:
            text = getattr(widget, "key", None) or str(widget.render()).strip()
            items.append((text, region.x, region.right))
    return sorted(items, key=lambda item: item[1])


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50), (60, 24)])
async def test_the_view_keys_are_in_the_footer_at_every_width(size: tuple[int, int]) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        items = footer_items(app)
        texts = [text for text, *_ in items]
        at = texts.index("1")
        assert texts[at : at + 7] == [*VIEW_KEYS, "views"]  # side by side, then the word
        assert {"question_mark", "q", "space"} <= set(texts)
        for (_, _, right), (_, x, _) in pairwise(items):
            assert right <= x  # nothing overlaps, the palette key docked right included
        assert items[-1][2] <= size[0]  # nothing cut at the edge


async def test_a_view_key_in_the_footer_shows_its_view_when_clicked() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        (six,) = [key for key in app.screen.query("FooterKey") if key.key == "6"]
        assert "what the last operation changed" in str(six.tooltip)
        # By its place: the footer recomposes when keys become available, replacing its keys.
        footer = app.query_one("#footer")
        await pilot.click(footer, offset=(six.region.x - footer.region.x, 0))
        assert await wait_until(pilot, lambda: app.view_area == "diff")
        assert app.query_one("#diff").display


def help_rows(app: DebuggerApp) -> dict[str, str]:
    return {row.keys: row.description for row in app.key_help()}


async def test_the_help_lists_the_view_and_speed_keys() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        rows = help_rows(app)
        assert [rows[key] for key in VIEW_KEYS] == [
            "tree",
            "cache",
            "timeline",
            "round",
            "metrics",
            "diff",
        ]
        assert rows["+ ="] == "faster" and rows["-"] == "slower"
        assert "home" not in rows  # a replay's key
        await pilot.press("question_mark")
        await pilot.pause()
        keys = " ".join(plain([app.screen.query_one("#help-keys", Static).content], 300))
        assert "what the last operation changed" in keys
        legend = plain([app.screen.query_one("#help-legend", Static).content], 300)
        assert "Round diff (key 6)" in legend
        assert any(
            "6 round diff" in line
            for line in plain([app.screen.query_one("#help-panes", Static).content], 300)
        )


async def test_a_replays_help_lists_home_and_end_and_not_the_speed_keys() -> None:
    app, _ = replay_app()
    async with app.run_test(size=(120, 40)):
        rows = help_rows(app)
        assert rows["home"] == "first" and rows["end"] == "last"
        assert "+ =" not in rows and rows["6"] == "diff"


async def test_a_key_that_becomes_available_is_undimmed_in_place() -> None:
    # Only availability changed: the footer keeps its key widgets (no rebuild, no relayout)
    # and undims undo once a round can be undone; a rebuilt footer would dim it the same way.
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        footer = app.query_one("#footer")
        before = {key.action: key for key in footer.query("FooterKey")}
        assert before["undo"].has_class("-disabled")  # nothing to undo yet
        await pilot.press("space")
        await pilot.pause()
        after = {key.action: key for key in footer.query("FooterKey")}
        assert not after["undo"].has_class("-disabled")
        assert all(after[action] is key for action, key in before.items())
        await pilot.press("u")  # back to the start: nothing to undo again
        await pilot.pause()
        assert after["undo"].has_class("-disabled")
        assert footer.query("FooterKey").first() is next(iter(after.values()))
