"""The help, the guide and the forms (add a request, roll back N): their keys and footers,
the help's columns, a form's errors, and what ctrl+s does over them."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.binding import Binding
from textual.widgets import Input

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import parse_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.screens.guide import GuideScreen
from deepinfer_tui.screens.help import HelpScreen
from deepinfer_tui.screens.rollback import RollbackScreen
from deepinfer_tui.session import Session
from tests.app.helpers import (
    footer_keys,
    make_app,
    messages,
    shown_lines,
)

SIZE = (120, 40)


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


async def test_the_helps_footer_shows_close_and_guide() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert footer_keys(app) == [("escape", "close"), ("g", "guide")]


async def test_the_helps_border_names_the_keys_its_footer_shows() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        subtitle = str(app.screen.query_one("#help").border_subtitle)
        closing, guide = subtitle.split(" · ")
        keys, verb = closing.rsplit(" ", 1)
        assert verb == "close" and guide == "g guide"  # the footer's words
        (close,) = [
            b for b in HelpScreen.BINDINGS if isinstance(b, Binding) and b.action == "close"
        ]
        shown = {"escape": "esc", "question_mark": "?"}
        assert sorted(keys.split(" / ")) == sorted(shown.get(k, k) for k in close.key.split(","))


@pytest.mark.parametrize("pane", ["#help-keys", "#help-panes"])
async def test_the_helps_wrapped_lines_start_under_their_column(pane: str) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        lines = [line for line in shown_lines(app.screen.query_one(pane)) if line.strip()]
        if pane == "#help-panes":
            assert lines.pop(0).strip() == "Panes"
        # Rows start with their key at column 2; the last column starts at one column in all.
        starts = {len(line) - len(line.lstrip()) for line in lines}
        column = max(starts)
        assert starts == {2, column} and column > 8
        wrapped = [line for line in lines if len(line) - len(line.lstrip()) == column]
        assert wrapped, "at 80 columns some rows wrap"
        for line in lines:
            if not line.startswith("   "):
                assert line[column - 2 : column] == "  " and line[column] != " "


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


async def test_the_add_forms_error_clears_when_a_field_is_edited() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a", *"1,2,99", "enter")
        screen = app.screen
        assert isinstance(screen, AddRequestScreen) and "99" in screen.error
        await pilot.press("backspace", "backspace")  # "1,2,": the old error no longer applies
        assert screen.error == ""
        await pilot.press("enter")  # a new refusal is shown again
        assert "comma" in screen.error
        await pilot.press("3", "enter")
        assert not isinstance(app.screen, AddRequestScreen)


async def test_the_rollback_forms_error_clears_when_the_count_is_edited() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "B", "z", "enter")
        screen = app.screen
        assert isinstance(screen, RollbackScreen)
        error = screen.query_one("#form-error")
        assert "whole number" in str(error.content)
        await pilot.press("backspace")
        assert str(error.content) == ""


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
        assert messages(app) == [f"Screenshot saved in {written.parent}/:\n{written.name}"]


async def test_an_empty_max_tokens_field_takes_the_default_of_eight() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        # The prompt, then into max tokens: select all and delete, leaving it empty.
        await pilot.press("a", *"5,6,7", "tab", "ctrl+a", "ctrl+k", "enter")
        assert not isinstance(app.screen, AddRequestScreen)
        (added,) = [r for r in app.session.snapshot()["requests"] if r["prompt"] == [5, 6, 7]]
        assert added["max_tokens"] == 8


async def test_ctrl_c_says_how_to_quit_in_plain_words() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        (notice,) = [m for m in messages(app) if "to quit the app" in m]
        assert "[b]" not in notice and "q" in notice.split("to quit")[0]
