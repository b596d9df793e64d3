"""Drive the debugger headlessly through the default scenario and save SVG screenshots.

    python screenshots/capture.py [--out DIR]

Writes start.svg, speculation.svg (a round with a rejected draft branch), cancel.svg,
warm.svg (request restored from a warm encoder prefix), help.svg, and speculation-80x24.svg
(the same moment in an 80x24 terminal). Each file is written to a temporary name and renamed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from textual.pilot import Pilot  # noqa: E402

from deepinfer_tui.app import DebuggerApp  # noqa: E402
from deepinfer_tui.scenario import default_scenario  # noqa: E402
from deepinfer_tui.session import Session  # noqa: E402
from deepinfer_tui.widgets import RequestTable  # noqa: E402

Moment = Callable[[Pilot[None]], Awaitable[None]]
WIDE = (120, 40)
SMALL = (80, 24)


async def select(pilot: Pilot[None], request_id: str) -> None:
    table = pilot.app.query_one(RequestTable)
    table.focus()
    target = table.get_row_index(request_id)
    while table.cursor_row != target:
        await pilot.press("down" if table.cursor_row < target else "up")


async def step_until(
    pilot: Pilot[None], reached: Callable[[dict[str, Any], int], bool]
) -> dict[str, Any]:
    app = pilot.app
    assert isinstance(app, DebuggerApp)
    while app.session.can_step():
        await pilot.press("space")
        for request in app.session.snapshot()["requests"]:
            if reached(request, app.engine.tick):
                return request
    raise SystemExit("the scenario never reached the moment to capture")


def rejected_this_round(request: dict[str, Any], tick: int) -> bool:
    tree = request["tree"]
    return (
        bool(tree)
        and tree["round"] == tick
        and any(node["verdict"] == "rejected" for node in tree["nodes"])
    )


def warm_restore(request: dict[str, Any], tick: int) -> bool:
    return request["restore"] is not None and request["restore"]["cache"] == "warm"


async def start(pilot: Pilot[None]) -> None:
    return None


async def speculation(pilot: Pilot[None]) -> None:
    await select(pilot, (await step_until(pilot, rejected_this_round))["id"])


async def cancel(pilot: Pilot[None]) -> None:
    await pilot.press("space")
    queued = [r for r in pilot.app.session.snapshot()["requests"] if r["status"] == "queued"]
    await select(pilot, queued[0]["id"])
    await pilot.press("c")


async def warm(pilot: Pilot[None]) -> None:
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


async def capture(name: str, moment: Moment, size: tuple[int, int], out: Path) -> Path:
    app = DebuggerApp(Session(default_scenario()))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await moment(pilot)
        await pilot.pause()
        svg = app.export_screenshot(title=f"deepinfer-tui · {name}")
    target = out / f"{name}.svg"
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(svg, encoding="utf-8")
    temporary.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder for the SVGs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, moment, size in SHOTS:
        path = asyncio.run(capture(name, moment, size, args.out))
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
