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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from deepinfer_tui.app import DebuggerApp  # noqa: E402
from deepinfer_tui.export import write_atomically  # noqa: E402
from deepinfer_tui.scenario import default_scenario  # noqa: E402
from deepinfer_tui.session import Session  # noqa: E402
from tests.app.tour import SHOTS, Moment  # noqa: E402


async def capture(name: str, moment: Moment, size: tuple[int, int], out: Path) -> Path:
    app = DebuggerApp(Session(default_scenario()))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await moment(pilot)
        await pilot.pause()
        svg = app.export_screenshot(title=f"deepinfer-tui · {name}")
    target = out / f"{name}.svg"
    write_atomically({target: svg})
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
