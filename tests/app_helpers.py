"""What the app tests share: a debugger over the built-in scenario, its notices, and waiting
for something the app does on a timer or in a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session


def make_app(**options: Any) -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()), **options)


def messages(app: DebuggerApp) -> list[str]:
    return [n.message for n in app._notifications]


async def wait_until(
    pilot: Pilot[Any], condition: Callable[[], bool], *, seconds: float = 6.0
) -> bool:
    """Let the app run until `condition` holds or `seconds` pass; returns whether it holds
    (the caller asserts, so a failure names what did not happen)."""
    step = 0.02
    for _ in range(int(seconds / step)):
        if condition():
            return True
        await pilot.pause(step)
    return condition()
