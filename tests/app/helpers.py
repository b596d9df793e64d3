"""What the app tests share: a debugger over the built-in scenario, its notices, a widget's
lines as drawn, and waiting for something the app does on a timer or in a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.style import Style
from textual.command import CommandList, CommandPalette
from textual.content import Content
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session


def make_app(**options: Any) -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()), **options)


def long_running_app() -> DebuggerApp:
    """Auto-run cannot reach the end of this session during a test (a round every 10 ms)."""
    session = Session(default_scenario().with_overrides(num_blocks=200))
    session.submit([1, 2, 3], max_tokens=500)
    app = DebuggerApp(session)
    app.AUTO_RUN_INTERVAL = 0.01
    return app


def messages(app: DebuggerApp) -> list[str]:
    return [n.message for n in app._notifications]


def palette_prompts(app: DebuggerApp) -> list[str]:
    """The palette's entries as drawn: the first line of each option, plain text."""
    options = app.screen.query_one(CommandList)
    prompts = []
    for index in range(options.option_count):
        prompt = options.get_option_at_index(index).prompt
        assert isinstance(prompt, Content)
        prompts.append(prompt.plain.split("\n")[0])
    return prompts


def palette_listed(app: DebuggerApp) -> bool:
    """The command palette is open and has listed its hits for what is typed in it (it
    searches in a worker that adds the hits in batches)."""
    palette = app.screen
    return (
        isinstance(palette, CommandPalette)
        and palette.has_class("-ready")  # its first search has run
        and not any(
            worker.node is palette
            and worker.group == palette._GATHER_COMMANDS_GROUP
            and not worker.is_finished
            for worker in app.workers
        )
    )


def shown_lines(widget: Widget) -> list[str]:
    """The widget's lines as drawn at its size, trailing spaces dropped."""
    region = Region(0, 0, widget.size.width, widget.size.height)
    return [strip.text.rstrip() for strip in widget.render_lines(region)]


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


def footer_keys(app: DebuggerApp) -> list[tuple[str, str]]:
    """(key, description) of each footer key drawn on the screen on top, on its last row."""
    bottom = app.screen.size.height - 1
    return [
        (key.key, key.description)
        for key in app.screen.query("FooterKey")
        if key.display and key.region.width and key.region.y == bottom
    ]


def generated(app: DebuggerApp, request_id: str) -> int:
    (view,) = [r for r in app.session.snapshot()["requests"] if r["id"] == request_id]
    return len(view["generated"])


def plain(lines: list, width: int = 200) -> list[str]:
    """Rich lines as the plain text a terminal without colour shows (one string per row)."""
    from rich.console import Console

    console = Console(width=width, color_system=None)
    with console.capture() as capture:
        for line in lines:
            console.print(line)
    return capture.get().splitlines()


def looks(strip: Strip) -> list[tuple[str, object, object, bool, bool, bool, bool]]:
    """Each cell of a line: its character and how it is drawn (colours resolved, no meta)."""
    cells = []
    for segment in strip:
        style = segment.style or Style()
        color = style.color.get_truecolor() if style.color else None
        bgcolor = style.bgcolor.get_truecolor() if style.bgcolor else None
        look = (color, bgcolor, bool(style.bold), bool(style.underline), bool(style.reverse))
        cells.extend((character, *look, bool(style.dim)) for character in segment.text)
    return cells
