"""Screen snapshots of the debugger at key moments of the default scenario.

Baselines live in tests/__snapshots__/; after an intended change to the screen or to the
engine's behaviour, regenerate them with
`python -m pytest tests/test_app_snapshots.py --snapshot-update` and look at the report.
The engine's clock is injected and nothing on screen blinks or depends on wall time, so the
same code renders the same SVG.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import RequestTable

WIDE = (120, 40)
SMALL = (80, 24)


def make_app() -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()))


async def select(pilot: Pilot[None], request_id: str) -> None:
    table = pilot.app.query_one(RequestTable)
    table.focus()
    target = table.get_row_index(request_id)
    while table.cursor_row != target:
        await pilot.press("down" if table.cursor_row < target else "up")


async def step_until(pilot: Pilot[None], reached: Any) -> dict[str, Any]:
    """Press space until `reached(request_view, tick)` holds for some request; return it."""
    app = pilot.app
    assert isinstance(app, DebuggerApp)
    while app.session.can_step():
        await pilot.press("space")
        for request in app.session.snapshot()["requests"]:
            if reached(request, app.engine.tick):
                return request
    raise AssertionError("the default scenario never reached the moment this test shows")


def rejected_this_round(request: dict[str, Any], tick: int) -> bool:
    tree = request["tree"]
    if not tree or tree["round"] != tick:
        return False
    return any(node["verdict"] == "rejected" for node in tree["nodes"])


def warm_restore(request: dict[str, Any], tick: int) -> bool:
    restore = request["restore"]
    return restore is not None and restore["cache"] == "warm"


async def mid_speculation(pilot: Pilot[None]) -> None:
    request = await step_until(pilot, rejected_this_round)
    await select(pilot, request["id"])


async def after_cancel(pilot: Pilot[None]) -> None:
    await pilot.press("space")
    queued = [r for r in pilot.app.session.snapshot()["requests"] if r["status"] == "queued"]
    await select(pilot, queued[0]["id"])
    await pilot.press("c")


async def warm(pilot: Pilot[None]) -> None:
    request = await step_until(pilot, warm_restore)
    await select(pilot, request["id"])


def test_start(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE)


def test_mid_speculation_with_a_rejected_branch(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=mid_speculation)


def test_after_cancel(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=after_cancel)


def test_warm_restore(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=warm)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, press=["question_mark"])


def test_small_terminal_mid_speculation(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=mid_speculation)
