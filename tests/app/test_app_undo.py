"""Undo, driven by the real keys: what it says it undid (and what it discarded with the
round), why it cannot, and that it pauses auto-run."""

from __future__ import annotations

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.describe import plural
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import StatusBar
from tests.app import tour
from tests.app.helpers import (
    generated,
    long_running_app,
    make_app,
    messages,
    shown_lines,
    wait_until,
)

SIZE = (120, 40)


def request_ids(app: DebuggerApp) -> set[str]:
    return {r["id"] for r in app.session.snapshot()["requests"]}


async def test_undo_pauses_auto_run_so_the_next_round_does_not_redo_it() -> None:
    app = long_running_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: app.engine.tick >= 3)
        await pilot.press("u")
        undone_to = app.engine.tick
        assert not app.auto_running
        await pilot.pause(0.2)  # twenty auto-run intervals
        assert app.engine.tick == undone_to
        (said,) = [m for m in messages(app) if m.startswith("Undid")]
        assert said.startswith(f"Undid round {undone_to + 1}")
        assert "Auto-run paused: press r to run on" in said
        assert "auto" not in str(app.query_one(StatusBar).content)
        await pilot.press("r")  # and r runs on from there
        assert await wait_until(pilot, lambda: app.engine.tick > undone_to)


async def test_undo_without_auto_run_of_a_bare_round_still_says_nothing() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "u")
        assert app.engine.tick == 1 and messages(app) == []


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


async def test_the_undo_notice_gives_the_tokens_a_clamped_rollback_removed() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space")
        had = generated(app, "request-1")
        assert 1 < had < 10
        await pilot.press("B", *"10", "enter")
        assert generated(app, "request-1") == 0
        await pilot.press("u")
        said = messages(app)[-1]
        assert f"rolling request-1 back {plural(had, 'token')} (asked for 10)" in said


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


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (0, "undo is off: this session keeps no rounds to undo (undo depth 0)"),
        (
            2,
            "no older round to undo: undo keeps the last 2 rounds at most, "
            "fewer when the pool needs their blocks",
        ),
    ],
)
async def test_undo_says_why_there_is_no_older_round(depth: int, expected: str) -> None:
    app = DebuggerApp(Session(default_scenario().with_overrides(undo_depth=depth)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space", "space", "u", "u", "u")
        assert app.engine.tick == 4 - depth
        assert messages(app)[-1] == expected


async def test_the_help_says_undo_discards_what_came_after_the_round() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        keys = shown_lines(app.screen.query_one("#help-keys"))
        (line,) = [line for line in keys if line.split()[:1] == ["u"]]
        assert "anything done since it" in line
