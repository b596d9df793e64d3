"""Defects a second exploratory tester found in the debugger, each driven by the real keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.binding import Binding

from deepinfer_tui import tour
from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.describe import plural
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.screens.help import HelpScreen
from deepinfer_tui.screens.rollback import RollbackScreen
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap, StatusBar
from tests.app.helpers import make_app, messages, palette_prompts, shown_lines, wait_until

SIZE = (120, 40)


def generated(app: DebuggerApp, request_id: str) -> int:
    (view,) = [r for r in app.session.snapshot()["requests"] if r["id"] == request_id]
    return len(view["generated"])


def long_running_app() -> DebuggerApp:
    """Auto-run cannot reach the end of this session during a test."""
    session = Session(default_scenario().with_overrides(num_blocks=200))
    session.submit([1, 2, 3], max_tokens=500)
    app = DebuggerApp(session)
    app.AUTO_RUN_INTERVAL = 0.01
    return app


# -- 1. undo during auto-run --------------------------------------------------------------------


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


# -- 2. the undo notice counts the tokens a rollback removed ------------------------------------


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


# -- 3. the palette lists one screenshot, ours --------------------------------------------------


async def test_the_palette_offers_only_the_screenshot_into_the_export_folder(
    tmp_path: Path,
) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause(0.2)
        await pilot.press(*"screensh")
        await pilot.pause(0.3)
        prompts = palette_prompts(app)
        assert prompts == ["Save this screen as an SVG [ctrl+s]"]
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: any(tmp_path.glob("*.svg")))


# -- 4. why undo has nothing older ----------------------------------------------------------------


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


# -- 5. the header keeps two rows on a narrow terminal --------------------------------------------


@pytest.mark.parametrize("width", [60, 80, 100])
async def test_the_header_keeps_two_rows_through_the_scenario(width: int) -> None:
    app = make_app()
    async with app.run_test(size=(width, 24)) as pilot:
        status = app.query_one(StatusBar)
        while True:
            await pilot.pause()
            lines = shown_lines(status)
            assert status.region.height == 2 and len(lines) == 2, lines
            assert all(len(line) <= width for line in lines)
            if not app.session.can_step():
                break
            await pilot.press("space")
        first, second = lines
        assert "complete" in first
        if width >= 80:  # the figures, in words or in their short forms, and the sparkline
            assert re.search(r"tick \d+ ·.* ■\d+", first)
            assert re.search(r"of 48 · acc(ept)? \d+% · (committed|tok) \d+ [▁▂▃▄▅▆▇█·]{8}", second)


async def test_a_wide_header_keeps_its_words() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        first, second = shown_lines(app.query_one(StatusBar))
        assert " · clock 0s · " in first and " queued " in first and " running " in first
        assert second.startswith(" blocks ") and " · accept " in second
        assert " · committed " in second


# -- 6. a replay frame's label and the scenario name ----------------------------------------------


async def test_a_replay_frames_label_is_set_apart_from_the_scenario_name() -> None:
    recorded = Session(default_scenario())
    recorded.step()
    recorded.step()
    recorded.rollback("request-1", 1)
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        assert "roll back request-1 by 1 token · default · tick 2" in first


# -- 7. a screenshot that cannot be written says why, under a title -----------------------------


@pytest.mark.parametrize("inside_a_file", [False, True])
async def test_a_failed_screenshot_says_why(tmp_path: Path, inside_a_file: bool) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    target = blocker / "sub" if inside_a_file else blocker
    app = make_app(export_dir=target)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        (failure,) = [n for n in app._notifications if n.severity == "error"]
        assert failure.title == "Screenshot"
        expected = (
            f"cannot create export folder {target}: Not a directory"
            if inside_a_file
            else f"cannot export into {target}: it is a file, not a folder"
        )
        assert failure.message == f"Screenshot failed: {expected}"
        assert sorted(tmp_path.iterdir()) == [blocker]


# -- 8. the help's columns on a narrow terminal ---------------------------------------------------


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


# -- 9. a form's refusal goes once the field changes ----------------------------------------------


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


# -- 10. the block pane's restore line ------------------------------------------------------------


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


async def test_a_long_scenario_name_leaves_the_figures_in_a_narrow_header() -> None:
    name = "two users sharing a long system prompt, then a warm restore after expiry"
    scenario = parse_scenario({**default_scenario().to_dict(), "name": name})
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        figures = r" · tick 2 · 0s · ◌\d+ ▶\d+ ■\d+$"
        assert re.search(r" two users sharing a lo\w*…" + figures, first), first


async def test_a_long_replay_label_leaves_the_figures_in_a_narrow_header() -> None:
    long_id = "r" * 64
    recorded = Session(
        parse_scenario(
            {
                **default_scenario().to_dict(),
                "events": [{"tick": 0, "submit": {"id": long_id, "prompt": [1, 2, 3]}}],
            }
        )
    )
    recorded.step()
    recorded.step()
    recorded.rollback(long_id, 1)
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        assert "roll back rrrrrrrrrrrrrrrrrrrrr…" in first and " · tick 2 · " in first, first


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
        assert any(line.startswith("running: no KV blocks yet (deferred") for line in lines)
        assert not any(line.startswith("finished") for line in lines), lines


async def test_a_long_divergence_takes_one_header_row() -> None:
    recorded = Session(default_scenario())
    recorded.step()
    recorded.step()
    data = trace_data(recorded)
    commit = next(e for e in data["events"] if e["kind"] == "commit")
    commit["kind"] = "x" * 5000
    replay = Replay(parse_trace(data))
    assert replay.divergence is not None
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = shown_lines(app.query_one(StatusBar))
        assert len(lines) == 3 and lines[2].startswith(" ⚠ diverged: event ")
        assert lines[2].endswith("…") and len(lines[2]) == 80
        assert app.query_one(BlockMap).region.height > 0  # the panes keep the screen
