"""Defects an exploratory tester found in the debugger, each driven by the real keys (Pilot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Input

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.screens.guide import GuideScreen
from deepinfer_tui.screens.help import HelpScreen
from deepinfer_tui.screens.rollback import RollbackScreen
from deepinfer_tui.session import Session
from deepinfer_tui.widgets.status import DescriptionLine
from tests.app import tour
from tests.app.helpers import make_app, messages, palette_prompts, shown_lines, wait_until

SIZE = (120, 40)
NO_TOKENS = "request-1 has no generated tokens to roll back"
NOTHING_TO_STEP = "nothing to step: every request has finished and no scenario event is due"


def request_ids(app: DebuggerApp) -> set[str]:
    return {r["id"] for r in app.session.snapshot()["requests"]}


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


# -- 1. the command palette ---------------------------------------------------------------------


async def test_every_palette_entry_shows_its_keys() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
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
        await pilot.pause(0.3)
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


# -- 2. the help's `g` and ctrl+s over other screens --------------------------------------------


async def test_g_in_the_help_opens_the_guide() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "Press g for the guide" in str(app.screen.query_one("#help-guide").content)
        await pilot.press("g")
        await pilot.pause()
        assert type(app.screen).__name__ == "GuideScreen"
        assert len(app.screen_stack) == 2  # the help closed on the way
        # Help opened from the guide: g goes back to that guide, not to a second one.
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("g")
        await pilot.pause()
        assert type(app.screen).__name__ == "GuideScreen" and len(app.screen_stack) == 2
        await pilot.press("escape")
        assert len(app.screen_stack) == 1


@pytest.mark.parametrize(
    ("keys", "dialog", "title"),
    [
        (("a",), AddRequestScreen, "Add a request"),
        (("space", "B"), RollbackScreen, "Roll back request-1"),
        (("f1",), HelpScreen, "Help"),
        (("g",), GuideScreen, "Hot, warm and cold"),
    ],
)
async def test_ctrl_s_saves_the_screen_with_a_dialog_open(
    tmp_path: Path, keys: tuple[str, ...], dialog: type, title: str
) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*keys)
        assert isinstance(app.screen, dialog)
        fields = {field.id: field.value for field in app.screen.query(Input)}
        await pilot.press("ctrl+s")
        await pilot.pause()
        (written,) = tmp_path.iterdir()
        assert title.replace(" ", "&#160;") in written.read_text(encoding="utf-8")
        assert isinstance(app.screen, dialog)  # still open, its fields as they were
        assert {field.id: field.value for field in app.screen.query(Input)} == fields
        assert messages(app) == [f"Screenshot saved: {written}"]


async def test_the_rollback_dialog_title_shows_an_id_that_looks_like_markup() -> None:
    scenario = parse_scenario(
        {"events": [{"tick": 0, "submit": {"id": "[B]x", "prompt": [1, 2], "max_tokens": 3}}]}
    )
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "B")
        assert isinstance(app.screen, RollbackScreen)
        await pilot.pause()
        drawn = app.export_screenshot().replace("&#160;", " ")
        assert "Roll back [B]x" in drawn


# -- 3. auto-run's round limit ------------------------------------------------------------------


async def test_auto_run_says_why_it_stopped_at_its_round_limit() -> None:
    app = make_app()
    app.AUTO_RUN_INTERVAL = 0.01
    app.AUTO_RUN_LIMIT = 3
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: not app.auto_running)
        assert app.engine.tick == 3 and app.session.can_step()  # stopped by the limit
        (said,) = messages(app)
        assert "after 3 rounds" in said and "press r" in said
        await pilot.press("r")  # and r does run on
        assert await wait_until(pilot, lambda: app.engine.tick > 3)


# -- 4. undo discards what was done since the round ---------------------------------------------


async def test_undo_names_a_submission_it_discards() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "a", *"7,7,7", "enter")
        (added,) = [r["id"] for r in app.session.snapshot()["requests"] if r["prompt"] == [7] * 3]
        assert app.selected_id == added
        await pilot.press("u")
        assert app.engine.tick == 1 and added not in request_ids(app)
        (said,) = messages(app)
        assert said.startswith("Undid round 2 ")
        assert f"{added}'s submission" in said


async def test_undo_names_rollbacks_cancels_and_clock_moves_it_discards() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "b", "t")
        await tour.select(pilot, "request-2")
        await pilot.press("c", "u")
        said = messages(app)[-1]
        assert "round 2" in said
        for done in ("rolling request-1 back 1 token", "the clock move", "cancelling request-2"):
            assert done in said, said
        assert said.index("rolling") < said.index("clock") < said.index("cancelling")


async def test_undo_of_a_bare_round_adds_no_notice_and_earlier_work_is_found_past_undos() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "u")
        assert app.engine.tick == 0 and messages(app) == []
        # Round 2 came after the rollback, so undoing it alone discards nothing else; a second
        # undo takes round 1 and the rollback done after it.
        await pilot.press("space", "space", "b", "space", "u")
        assert messages(app) == []
        await pilot.press("u")
        assert app.engine.tick == 1
        (said,) = messages(app)
        assert "round 2" in said and "rolling request-1 back 1 token" in said


async def test_the_help_says_undo_discards_what_came_after_the_round() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        keys = shown_lines(app.screen.query_one("#help-keys"))
        (line,) = [line for line in keys if line.split()[:1] == ["u"]]
        assert "anything done since it" in line


# -- 5. dialog footers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "dialog"), [(("a",), AddRequestScreen), (("space", "B"), RollbackScreen)]
)
async def test_a_forms_footer_shows_its_own_keys(keys: tuple[str, ...], dialog: type) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*keys)
        assert isinstance(app.screen, dialog)
        assert footer_keys(app) == [("enter", "confirm"), ("escape", "cancel")]
        await pilot.press("escape")  # and they do what the footer says
        assert not isinstance(app.screen, dialog)


async def test_the_helps_footer_shows_close_and_guide() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert footer_keys(app) == [("escape", "close"), ("g", "guide")]


# -- 6. identical notifications -----------------------------------------------------------------


async def test_a_blocked_key_pressed_thirty_times_shows_one_toast() -> None:
    app = make_app()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press(*["u"] * 30)
        await pilot.pause(0.2)
        assert messages(app) == ["nothing to undo"]
        assert len(app.screen.query("Toast")) == 1
        await pilot.press("b")  # a different message is a second toast
        await pilot.pause(0.2)
        assert messages(app) == ["nothing to undo", NO_TOKENS]
        assert len(app.screen.query("Toast")) == 2
        await pilot.press("u")  # the same again: moved to the newest, still one of it
        await pilot.pause(0.2)
        assert messages(app) == [NO_TOKENS, "nothing to undo"]


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


# -- 8. the scenario's description ----------------------------------------------------------------


def described_app(description: str) -> DebuggerApp:
    scenario = parse_scenario(
        {
            "name": "two-users",
            "description": description,
            "events": [{"tick": 0, "submit": {"prompt": [1, 2, 3], "max_tokens": 3}}],
        }
    )
    return DebuggerApp(Session(scenario))


async def test_the_description_shows_under_the_header() -> None:
    app = described_app("two users [b]share[/b] a prefix")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        status = app.query_one("#status")
        assert line.region.y == status.region.bottom and line.region.height == 1
        assert line.render_line(0).text.strip() == "two users [b]share[/b] a prefix"


async def test_a_long_description_ends_in_an_ellipsis_at_80_columns() -> None:
    words = " ".join(f"word{n}" for n in range(40))
    app = described_app(words)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        drawn = line.render_line(0).text
        assert len(drawn) == 80 and line.region.height == 1
        assert drawn.rstrip().endswith("…")
        # The words in order, the last one possibly cut where the ellipsis starts.
        *whole, cut = drawn.rstrip().removesuffix("…").split()
        assert len(whole) > 5 and whole == words.split()[: len(whole)]
        assert words.split()[len(whole)].startswith(cut)


@pytest.mark.parametrize(("description", "size"), [("", SIZE), ("two users", (80, 24))])
async def test_the_description_line_is_not_drawn_when_empty_or_short(
    description: str, size: tuple[int, int]
) -> None:
    app = described_app(description)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        assert not line.region.height
        status = app.query_one("#status")
        assert app.query_one("#panes").region.y == status.region.bottom
        assert "two users" not in str(status.content)
