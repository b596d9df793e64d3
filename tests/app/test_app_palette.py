"""The command palette (ctrl+p): every entry with its keys, the same refusals as the keys,
and one screenshot entry, ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.command import CommandList, CommandPalette

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.session import Session
from tests.app.helpers import make_app, messages, palette_listed, palette_prompts, wait_until

SIZE = (120, 40)
NO_TOKENS = "request-1 has no generated tokens to roll back"
NOTHING_TO_STEP = "nothing to step: every request has finished and no scenario event is due"


def highlighted_prompt(app: DebuggerApp) -> str:
    options = app.screen.query_one(CommandList)
    assert options.highlighted is not None
    return palette_prompts(app)[options.highlighted]


async def run_from_palette(pilot: Any, app: DebuggerApp, query: str, keys: str) -> None:
    """Type `query` into the palette and press Enter on the top hit, which must be the entry
    whose keys are `keys`."""
    await pilot.press("ctrl+p")
    assert await wait_until(pilot, lambda: palette_listed(app))
    await pilot.press(*query)
    assert await wait_until(pilot, lambda: palette_listed(app))
    assert f"[{keys}]" in highlighted_prompt(app)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette))
    await pilot.pause()  # the command runs once the palette has closed
    assert not isinstance(app.screen, CommandPalette)


async def test_every_palette_entry_shows_its_keys() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        assert await wait_until(pilot, lambda: palette_listed(app))
        prompts = palette_prompts(app)
        expected = {
            "Run one engine round": "[space n]",
            "Cancel the selected request": "[c]",
            "Roll the selected request back 1 token": "[b]",
            "Roll the selected request back N tokens (asks N)": "[B]",
            "Undo the last round and anything done since it": "[u]",
            "Add a request (asks tokens)": "[a]",
            "Save this screen as an SVG": "[ctrl+s]",
            "Keys, panes and legend": "[? f1]",
        }
        for title, keys in expected.items():
            (prompt,) = [p for p in prompts if p.startswith(title)]
            assert prompt.startswith(f"{title} {keys}"), prompt
        # A typed search highlights the hits and still shows the keys.
        await pilot.press(*"cancel")
        assert await wait_until(pilot, lambda: palette_listed(app))
        assert highlighted_prompt(app) == "Cancel the selected request [c]"


async def test_a_refusal_from_the_palette_gives_the_keys_reason() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await run_from_palette(pilot, app, "Roll the selected request back 1", "b")
        assert messages(app)[-1] == NO_TOKENS
        assert not any("rollback" in m or "cannot act" in m for m in messages(app))
        await pilot.press("b")  # the key: the same words
        assert messages(app)[-1] == NO_TOKENS
        assert app.session.operations == []


async def test_the_palette_says_why_auto_run_cannot_start_once_the_scenario_is_over() -> None:
    session = Session(default_scenario())
    session.run()
    app = DebuggerApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await run_from_palette(pilot, app, "Run / pause auto", "r")
        assert not app.auto_running
        assert messages(app) == [NOTHING_TO_STEP]
        await pilot.press("r")
        assert messages(app)[-1] == NOTHING_TO_STEP  # the key's reason is the palette's


async def test_a_debugger_action_from_the_palette_over_a_dialog_says_to_close_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        await run_from_palette(pilot, app, "Run one engine", "space n")
        assert isinstance(app.screen, AddRequestScreen)
        assert app.engine.tick == 0
        assert messages(app) == ["close the dialog first"]


async def test_the_palette_offers_only_the_screenshot_into_the_export_folder(
    tmp_path: Path,
) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        assert await wait_until(pilot, lambda: palette_listed(app))
        await pilot.press(*"screensh")
        assert await wait_until(pilot, lambda: palette_listed(app))
        prompts = palette_prompts(app)
        assert prompts == ["Save this screen as an SVG [ctrl+s]"]
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: any(tmp_path.glob("*.svg")))
