"""What the app says in its toasts: one toast per message however often it is said, why a
screenshot failed, and why auto-run stopped at its round limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.helpers import make_app, messages, wait_until

SIZE = (120, 40)
NO_TOKENS = "request-1 has no generated tokens to roll back"


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
