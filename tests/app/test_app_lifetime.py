"""Nothing the app starts outlives it: a timer, a worker or a round thread that reports while
the app is closing (its panes going or gone) leaves the screen and the session alone.

Each test holds the app's shutdown open with a widget that is slow to unmount, so what
would report after the panes are gone reports then, whatever the machine's load."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from textual.widget import Widget

from tests.app.helpers import long_running_app, make_app

SIZE = (120, 40)
HELD_OPEN = 0.3  # seconds the shutdown is held open: thirty auto-run intervals


class SlowToUnmount(Widget):
    """Runs `meanwhile` as it unmounts, which keeps the app's shutdown open until it ends."""

    def __init__(self, meanwhile: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    async def on_unmount(self) -> None:
        await self.meanwhile()


async def hold_open() -> None:
    await asyncio.sleep(HELD_OPEN)


async def test_auto_run_neither_steps_nor_draws_once_the_app_closes() -> None:
    app = long_running_app()
    async with app.run_test(size=SIZE) as pilot:
        await app.mount(SlowToUnmount(hold_open))
        await pilot.press("r")
        assert app.auto_running
        tick = app.engine.tick
    # run_test re-raises what a callback raised during the shutdown (NoMatches, once).
    assert not app.auto_running
    assert app.engine.tick <= tick + 1  # at most the round already under way


async def test_a_background_round_that_ends_while_the_app_closes_is_not_drawn() -> None:
    app = make_app()
    app.BACKGROUND_POSITIONS = 1  # every round runs on its own thread
    gate = threading.Event()
    ended = threading.Event()
    step = app.session.engine.step

    def held_step() -> object:
        gate.wait(30)
        try:
            return step()
        finally:
            ended.set()

    async def release_the_round() -> None:
        gate.set()
        while not ended.is_set():
            await asyncio.sleep(0.01)
        await hold_open()  # the round's report is handled meanwhile

    app.session.engine.step = held_step  # type: ignore[method-assign]
    try:
        async with app.run_test(size=SIZE) as pilot:
            await app.mount(SlowToUnmount(release_the_round))
            await pilot.press("space")
            assert app.computing is not None
    finally:
        gate.set()
    assert ended.is_set() and app.engine.tick == 1
