"""Named moments of the default scenario, reached by pressing the debugger's real keys
(for the tests and `screenshots/capture.py`; not part of the installed package).

The screenshot script and the snapshot tests show the same moments, so both drive the app
through these functions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from textual.pilot import Pilot

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.widgets import RequestTable

Moment = Callable[[Pilot[None]], Awaitable[None]]
WIDE = (120, 40)
SMALL = (80, 24)
LARGE = (160, 50)  # the wide layout: requests | blocks | draft tree in one row


async def select(pilot: Pilot[None], request_id: str) -> None:
    """Move the request table's cursor to `request_id` with the arrow keys."""
    table = pilot.app.query_one(RequestTable)
    table.focus()
    target = table.get_row_index(request_id)
    while table.cursor_row != target:
        await pilot.press("down" if table.cursor_row < target else "up")


ROUND_WAIT_PAUSES = 6000  # of 10 ms: a minute


async def step_until(
    pilot: Pilot[None], reached: Callable[[Mapping[str, Any], int], bool]
) -> Mapping[str, Any]:
    """Press space until `reached(request_view, tick)` holds for some request; return it."""
    app = pilot.app
    assert isinstance(app, DebuggerApp)
    while app.session.can_step():
        await pilot.press("space")
        for _ in range(ROUND_WAIT_PAUSES):  # a long round runs on its own thread
            if app.computing is None:
                break
            await pilot.pause(0.01)
        else:
            raise RuntimeError("a background round did not end within a minute")
        view = app.view  # what the keypress put on screen
        for request in view.snapshot["requests"]:
            if reached(request, view.tick):
                return request
    raise RuntimeError("the scenario never reached the moment asked for")


def rejected_this_round(request: Mapping[str, Any], tick: int) -> bool:
    tree = request["tree"]
    if not tree or tree["round"] != tick:
        return False
    return any(node["verdict"] == "rejected" for node in tree["nodes"])


def warm_restore(request: Mapping[str, Any], tick: int) -> bool:
    restore = request["restore"]
    return restore is not None and restore["cache"] == "warm"


async def start(pilot: Pilot[None]) -> None:
    return None


async def speculation(pilot: Pilot[None]) -> None:
    """The first round in which the target rejected a draft branch."""
    await select(pilot, (await step_until(pilot, rejected_this_round))["id"])


async def cancel(pilot: Pilot[None]) -> None:
    """One round in, the first queued request is selected and cancelled with `c`."""
    await pilot.press("space")
    app = pilot.app
    assert isinstance(app, DebuggerApp)
    queued = [r for r in app.view.snapshot["requests"] if r["status"] == "queued"]
    await select(pilot, queued[0]["id"])
    await pilot.press("c")


async def warm(pilot: Pilot[None]) -> None:
    """The first request restored from a warm encoder prefix."""
    await select(pilot, (await step_until(pilot, warm_restore))["id"])


async def help_screen(pilot: Pilot[None]) -> None:
    await pilot.press("question_mark")


SHOTS: tuple[tuple[str, Moment, tuple[int, int]], ...] = (
    ("start", start, WIDE),
    ("speculation", speculation, WIDE),
    ("cancel", cancel, WIDE),
    ("warm", warm, WIDE),
    ("help", help_screen, WIDE),
    ("speculation-80x24", speculation, SMALL),
)
