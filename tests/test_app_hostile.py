"""Defects an exploratory tester found in the debugger, each driven by the real keys (Pilot)."""

from __future__ import annotations

from typing import Any

from textual.command import CommandList, CommandPalette
from textual.content import Content

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session

SIZE = (120, 40)
NO_TOKENS = "request-1 has no generated tokens to roll back"
NOTHING_TO_STEP = "nothing to step: every request has finished and no scenario event is due"


def make_app(**options: Any) -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()), **options)


def messages(app: DebuggerApp) -> list[str]:
    return [n.message for n in app._notifications]


def request_ids(app: DebuggerApp) -> set[str]:
    return {r["id"] for r in app.session.snapshot()["requests"]}


def palette_prompts(app: DebuggerApp) -> list[str]:
    """The palette's entries as drawn: the first line of each option, plain text."""
    options = app.screen.query_one(CommandList)
    prompts = []
    for index in range(options.option_count):
        prompt = options.get_option_at_index(index).prompt
        assert isinstance(prompt, Content)
        prompts.append(prompt.plain.split("\n")[0])
    return prompts


def highlighted_prompt(app: DebuggerApp) -> str:
    options = app.screen.query_one(CommandList)
    assert options.highlighted is not None
    return palette_prompts(app)[options.highlighted]


async def run_from_palette(pilot: Any, app: DebuggerApp, query: str, keys: str) -> None:
    """Type `query` into the palette and press Enter on the top hit, which must be the entry
    whose keys are `keys`."""
    await pilot.press("ctrl+p")
    await pilot.pause(0.2)
    await pilot.press(*query)
    await pilot.pause(0.3)
    assert f"[{keys}]" in highlighted_prompt(app)
    await pilot.press("enter")
    await pilot.pause(0.2)
    assert not isinstance(app.screen, CommandPalette)


def footer_keys(app: DebuggerApp) -> list[tuple[str, str]]:
    """(key, description) of each footer key drawn on the screen on top, on its last row."""
    bottom = app.screen.size.height - 1
    return [
        (key.key, key.description)
        for key in app.screen.query("FooterKey")
        if key.display and key.region.width and key.region.y == bottom
    ]


# -- 7. the footer's palette key follows the width ----------------------------------------------


async def test_the_palette_key_follows_resizes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:

        async def palette_shown(width: int) -> bool:
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            return ("ctrl+p", "palette") in footer_keys(app)

        assert await palette_shown(120)
        assert not await palette_shown(80)
        assert await palette_shown(120)
        assert not await palette_shown(100)
        assert await palette_shown(110)
        assert not await palette_shown(109)
