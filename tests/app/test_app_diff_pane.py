"""Key 6 shows the round diff: live against the session before its last operation, in a replay
against the previous frame; Home and End go to a replay's first and last frame."""

from __future__ import annotations

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.helpers import make_app, messages, shown_lines
from tests.app.tour import select

SIZE = (120, 40)


def diff_text(app: DebuggerApp) -> str:
    return "\n".join(shown_lines(app.query_one("#diff-lines")))


def generated(app: DebuggerApp, request_id: str) -> list[int]:
    (view,) = [r for r in app.view.snapshot["requests"] if r["id"] == request_id]
    return list(view["generated"])


async def test_key_6_shows_what_the_last_step_changed() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.pause()
        pane = app.query_one("#diff")
        assert pane.display and not app.query_one("#tree").display
        assert "no earlier frame yet" in diff_text(app)
        await pilot.press("space")
        await pilot.pause()
        text = diff_text(app)
        assert pane.border_title == "Diff · t1"
        assert "t0 → t1 · step" in text
        assert "request-1 queued → " in text  # admitted in round 1
        tokens = " ".join(map(str, generated(app, "request-1")))
        assert f"request-1 queued → decoding +[{tokens}]" in text
        assert "blocks allocated" in text or "block allocated" in text
        await pilot.press("1")
        await pilot.pause()
        assert app.query_one("#tree").display and not pane.display


async def test_a_cancel_and_a_rollback_show_what_they_freed_and_removed() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space", "6")
        await select(pilot, "request-1")
        before = generated(app, "request-1")
        await pilot.press("b")
        await pilot.pause()
        text = diff_text(app)
        assert "roll back request-1 by 1 token" in text
        assert f"request-1 -[{before[-1]}]" in text  # the token it removed
        assert "-1 rolled back" in text
        await pilot.press("c")
        await pilot.pause()
        text = diff_text(app)
        assert "cancel request-1" in text
        assert "request-1 decoding → finished (cancelled)" in text
        assert "freed" in text or "refcounts" in text  # its blocks went, or the cache kept them


async def test_an_undo_shows_the_round_it_took_back() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "6")
        tokens = generated(app, "request-1")
        await pilot.press("u")
        await pilot.pause()
        text = diff_text(app)
        assert "t2 → t1 · undo" in text
        kept = generated(app, "request-1")
        removed = " ".join(map(str, tokens[len(kept) :]))
        assert f"request-1 -[{removed}]" in text


def replay_app() -> tuple[DebuggerApp, Replay]:
    recorded = Session(default_scenario())
    for _ in range(3):
        recorded.step()
    recorded.cancel("request-1")
    recorded.step()
    replay = Replay(parse_trace(trace_data(recorded)))
    return DebuggerApp(replay.session, replay=replay), replay


async def test_a_replay_diffs_each_frame_against_the_one_before() -> None:
    app, replay = replay_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.pause()
        assert "no earlier frame yet" in diff_text(app)  # the start
        await pilot.press("space", "space", "space", "space")
        await pilot.pause()
        assert replay.position == 4
        text = diff_text(app)
        assert "t3 → t3 · cancel request-1" in text
        assert "request-1 decoding → finished (cancelled)" in text
        await pilot.press("u")
        await pilot.pause()
        assert "t2 → t3 · step" in diff_text(app)  # the live diff's words


async def test_home_and_end_go_to_the_first_and_last_frame() -> None:
    app, replay = replay_app()
    last = len(replay.frames) - 1
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.focused is app.query_one("#requests")  # the table's own Home and End yield
        await pilot.press("end")
        await pilot.pause()
        assert replay.position == last and app.view.tick == replay.frames[last].snapshot["tick"]
        await pilot.press("end")  # already there: it says so
        await pilot.pause()
        assert messages(app)[-1] == "this is the last frame"
        await pilot.press("home")
        await pilot.pause()
        assert replay.position == 0 and app.view.tick == 0
        await pilot.press("home")
        await pilot.pause()
        assert messages(app)[-1] == "this is the first frame"


async def test_home_and_end_are_not_frame_keys_live() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "end", "home")
        await pilot.pause()
        assert app.engine.tick == 1  # nothing moved through time
        assert not messages(app)  # the table's own keys: no "saved trace" refusal
        assert app.check_action("first_frame", ()) is False
        assert app.check_action("last_frame", ()) is False
