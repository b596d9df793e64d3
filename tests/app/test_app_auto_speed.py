"""`+` and `-` step auto-run's wait between rounds through fixed steps, running or stopped,
clamped at both ends with a message; the header shows the wait while it runs."""

from __future__ import annotations

import pytest

from deepinfer_tui.auto_run import next_wait
from deepinfer_tui.bindings import AUTO_RUN_WAITS
from tests.app.helpers import long_running_app, make_app, messages, shown_lines, wait_until

SIZE = (120, 40)


def test_the_steps_and_their_ends() -> None:
    assert tuple(sorted(AUTO_RUN_WAITS, reverse=True)) == AUTO_RUN_WAITS  # slowest first
    assert next_wait(0.25, faster=True) == 0.1
    assert next_wait(0.25, faster=False) == 0.5
    assert next_wait(0.3, faster=True) == 0.25  # off the steps: the nearest one that way
    with pytest.raises(ValueError, match=r"at its fastest: a round every 0\.02 s"):
        next_wait(0.02, faster=True)
    with pytest.raises(ValueError, match="at its slowest: a round every 2 s"):
        next_wait(2.0, faster=False)


def header(app) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(shown_lines(app.query_one("#status")))


async def test_speed_keys_while_stopped_set_the_next_run() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.auto_interval == app.AUTO_RUN_INTERVAL == 0.25
        await pilot.press("plus")
        await pilot.pause()
        assert app.auto_interval == 0.1
        assert messages(app)[-1] == "a round every 0.1 s (press r to run)"
        await pilot.press("minus", "minus")
        await pilot.pause()
        assert app.auto_interval == 0.5
        assert app.engine.tick == 0  # no key of these steps
        await pilot.press("r")
        await pilot.pause()
        assert "▶ auto 0.5s" in header(app)
        await pilot.press("r")


async def test_speed_keys_while_running_change_the_pace_at_once() -> None:
    app = long_running_app()
    app.AUTO_RUN_INTERVAL = 0.3  # off the steps
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await pilot.pause()
        assert app.auto_running
        await pilot.press("plus")  # the nearest shorter step
        await pilot.pause()
        assert app.auto_interval == 0.25 and app.auto_running
        assert messages(app)[-1] == "a round every 0.25 s"
        assert "▶ auto 0.25s" in header(app)
        for _ in AUTO_RUN_WAITS:
            await pilot.press("minus")
        await pilot.pause()
        assert app.auto_interval == 2.0
        assert messages(app)[-1] == "auto-run is at its slowest: a round every 2 s"
        tick = app.engine.tick
        await pilot.pause(0.5)
        assert app.engine.tick - tick <= 1  # one round in 2 s, not fifty
        for _ in AUTO_RUN_WAITS:
            await pilot.press("equals_sign")  # `=`: the `+` key without shift
        await pilot.pause()
        assert app.auto_interval == 0.02
        assert messages(app)[-1] == "auto-run is at its fastest: a round every 0.02 s"
        # Faster all along: dozens of rounds while the keys were pressed (or all of them).
        assert await wait_until(pilot, lambda: app.engine.tick >= tick + 20)


async def test_speed_keys_do_nothing_in_a_replay() -> None:
    from tests.app.test_app_diff_pane import replay_app

    app, _ = replay_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus")
        await pilot.pause()
        assert app.check_action("run_faster", ()) is False
        assert messages(app)[-1] == "a saved trace is read-only: this key acts in a live session"
