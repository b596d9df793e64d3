"""Rounds too long for the event loop run on a thread of their own: the screen stays live, keys
that would read or change the session wait with a reason, quitting does not wait, and the
result is the round the engine would have computed in place."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import StatusBar
from tests.app.helpers import make_app, messages, wait_until
from tests.app.tour import WIDE
from tests.engine.helpers import strip_clock

SIZE = (120, 40)


def header(app: DebuggerApp) -> str:
    return str(app.query_one(StatusBar).content)


def every_round_in_background(app: DebuggerApp) -> DebuggerApp:
    app.BACKGROUND_POSITIONS = 1
    return app


@contextmanager
def rounds_held(app: DebuggerApp) -> Iterator[Callable[[], None]]:
    """Every round waits until the returned `release()` is called (at the latest on exit)."""
    engine = app.session.engine
    gate = threading.Event()
    step = engine.step

    def held_step() -> Any:
        gate.wait(30)
        return step()

    engine.step = held_step  # type: ignore[method-assign]
    try:
        yield gate.set
    finally:
        gate.set()


def inline_session(rounds: int) -> Session:
    session = Session(default_scenario())
    for _ in range(rounds):
        session.step()
    return session


async def test_a_long_round_keeps_the_screen_live_and_keys_wait_for_it() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")  # a short round, computed in place: three requests now
        assert app.engine.tick == 1
        every_round_in_background(app)
        with rounds_held(app) as release:
            positions = app.engine.pending_positions()
            await pilot.press("space")
            assert f"computing round 2 · {positions} positions" in header(app)
            assert app.engine.tick == 1
            for key, action in (("space", "step"), ("c", "cancel"), ("u", "undo")):
                await pilot.press(key)
                assert messages(app)[-1] == (
                    f"round 2 is still being computed ({positions} positions)"
                ), action
            assert app.check_action("export", ()) is None  # an export would read the session
            assert app.check_action("help", ()) is True
            selected = app.selected_id
            await pilot.press("down")  # the panes still follow the cursor
            assert app.selected_id != selected
            release()
            assert await wait_until(pilot, lambda: "computing" not in header(app))
        assert app.engine.tick == 2
        assert app.check_action("step", ()) is True
        assert strip_clock(app.session.snapshot()) == strip_clock(inline_session(2).snapshot())


async def test_auto_run_of_background_rounds_ends_where_an_inline_run_does() -> None:
    app = every_round_in_background(make_app())
    app.AUTO_RUN_INTERVAL = 0.01
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: app.session.finished, seconds=20)
        inline = inline_session(0)
        inline.run()
        assert (
            strip_clock(app.session.snapshot())["requests"]
            == strip_clock(inline.snapshot())["requests"]
        )
        assert [e["kind"] for e in app.session.log()] == [e["kind"] for e in inline.log()]


@pytest.mark.parametrize("failure", [ZeroDivisionError, SystemExit])
async def test_a_background_round_that_fails_is_reported_and_changes_nothing(
    failure: type[BaseException],
) -> None:
    app = every_round_in_background(make_app())
    engine = app.session.engine

    def failing_step() -> Any:
        raise failure("the round divided by zero")

    engine.step = failing_step  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        before = strip_clock(app.session.snapshot())
        await pilot.press("space")
        assert await wait_until(pilot, lambda: "computing" not in header(app))
        assert messages(app)[-1] == f"{failure.__name__}: the round divided by zero"
        assert app.computing is None and app.check_action("step", ()) is True
        assert strip_clock(app.session.snapshot()) == before
        assert app.session.operations == []


async def test_quitting_does_not_wait_for_a_background_round() -> None:
    app = every_round_in_background(make_app())
    with rounds_held(app):
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("space")
            assert "computing round 1" in header(app)
            await pilot.press("q")
            assert await wait_until(pilot, lambda: not app.is_running)


def test_the_header_while_a_round_is_computed(snap_compare: Any) -> None:
    app = every_round_in_background(make_app())
    with rounds_held(app):

        async def start_a_round(pilot: Any) -> None:
            await pilot.press("space")

        assert snap_compare(app, terminal_size=WIDE, run_before=start_a_round)


def test_the_readme_states_the_threshold() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"compute {DebuggerApp.BACKGROUND_POSITIONS} positions or more" in readme
