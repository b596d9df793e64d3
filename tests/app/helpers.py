"""What the app tests share: a debugger over the built-in scenario, its notices, a widget's
lines as drawn, and waiting for something the app does on a timer or in a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.command import CommandList
from textual.content import Content
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session


def make_app(**options: Any) -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()), **options)


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
