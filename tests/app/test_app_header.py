"""The header, the scenario's description under it and the footer, at every width: rows
kept, figures kept, long names and labels cut."""

from __future__ import annotations

import re

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap, StatusBar
from deepinfer_tui.widgets.status import DescriptionLine, render_status
from deepinfer_tui.widgets.view import View
from tests.app.helpers import (
    footer_keys,
    looks,
    make_app,
    shown_lines,
)

SIZE = (120, 40)


def described_app(description: str) -> DebuggerApp:
    scenario = parse_scenario(
        {
            "name": "two-users",
            "description": description,
            "events": [{"tick": 0, "submit": {"prompt": [1, 2, 3], "max_tokens": 3}}],
        }
    )
    return DebuggerApp(Session(scenario))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("width", [40, 60, 80, 160])
async def test_header_lines_drawn_directly_look_as_textual_draws_them(
    width: int, theme: str
) -> None:
    # The header draws its fitted lines from Rich's segments; with direct_lines off they go
    # through Textual's Content. Round after round, both draw the same cells.
    app = make_app()
    async with app.run_test(size=(width, 24)) as pilot:
        app.theme = theme
        status = app.query_one(StatusBar)
        for _ in range(6):
            await pilot.press("space")
            await pilot.pause()
            height = status.size.height
            direct = [looks(status.render_line(y)) for y in range(height)]
            status.direct_lines = False
            assert [looks(status.render_line(y)) for y in range(height)] == direct
            status.direct_lines = True


@pytest.mark.parametrize("width", [60, 80, 100])
async def test_the_header_keeps_two_rows_through_the_scenario(width: int) -> None:
    app = make_app()
    async with app.run_test(size=(width, 24)) as pilot:
        status = app.query_one(StatusBar)
        while True:
            await pilot.pause()
            lines = shown_lines(status)
            assert status.region.height == 2 and len(lines) == 2, lines
            assert all(len(line) <= width for line in lines)
            if not app.session.can_step():
                break
            await pilot.press("space")
        first, second = lines
        assert "complete" in first
        if width >= 80:  # the figures, in words or in their short forms, and the sparkline
            assert re.search(r"tick \d+ ·.* ✓\d+", first)
            budget = r"( · bud(get)? \d+/[\d,]+)?"  # the round's rows of its token budget, if room
            assert re.search(
                rf"of 48{budget} · acc(ept)? \d+% · (committed|tok) \d+ [▁▂▃▄▅▆▇█·]{{8}}", second
            )


async def test_a_wide_header_keeps_its_words() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space")
        first, second = shown_lines(app.query_one(StatusBar))
        assert " · clock 0s · " in first and " queued " in first and " running " in first
        assert second.startswith(" blocks ") and " · accept " in second
        assert " · committed " in second


async def test_a_long_scenario_name_leaves_the_figures_in_a_narrow_header() -> None:
    name = "two users sharing a long system prompt, then a warm restore after expiry"
    scenario = parse_scenario({**default_scenario().to_dict(), "name": name})
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        figures = r" · tick 2 · 0s · ◌\d+ ▶\d+ ✓\d+$"
        assert re.search(r" two users sharing a lo\w*…" + figures, first), first


async def test_a_replay_frames_label_is_set_apart_from_the_scenario_name() -> None:
    recorded = Session(default_scenario())
    recorded.step()
    recorded.step()
    recorded.rollback("request-1", 1)
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        assert "roll back request-1 by 1 token · default · tick 2" in first


async def test_a_long_replay_label_leaves_the_figures_in_a_narrow_header() -> None:
    long_id = "r" * 64
    recorded = Session(
        parse_scenario(
            {
                **default_scenario().to_dict(),
                "events": [{"tick": 0, "submit": {"id": long_id, "prompt": [1, 2, 3]}}],
            }
        )
    )
    recorded.step()
    recorded.step()
    recorded.rollback(long_id, 1)
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("space", "space", "space")
        first = shown_lines(app.query_one(StatusBar))[0]
        assert "roll back rrrrrrrrrrrrrrrrrrrrr…" in first and " · tick 2 · " in first, first


async def test_a_long_divergence_takes_one_header_row() -> None:
    recorded = Session(default_scenario())
    recorded.step()
    recorded.step()
    data = trace_data(recorded)
    commit = next(e for e in data["events"] if e["kind"] == "commit")
    commit["kind"] = "x" * 5000
    replay = Replay(parse_trace(data))
    assert replay.divergence is not None
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = shown_lines(app.query_one(StatusBar))
        assert len(lines) == 3 and lines[2].startswith(" ⚠ diverged: event ")
        assert lines[2].endswith("…") and len(lines[2]) == 80
        assert app.query_one(BlockMap).region.height > 0  # the panes keep the screen


async def test_the_description_shows_under_the_header() -> None:
    app = described_app("two users [b]share[/b] a prefix")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        status = app.query_one("#status")
        assert line.region.y == status.region.bottom and line.region.height == 1
        assert line.render_line(0).text.strip() == "two users [b]share[/b] a prefix"


async def test_a_long_description_ends_in_an_ellipsis_at_80_columns() -> None:
    words = " ".join(f"word{n}" for n in range(40))
    app = described_app(words)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        drawn = line.render_line(0).text
        assert len(drawn) == 80 and line.region.height == 1
        assert drawn.rstrip().endswith("…")
        # The words in order, the last one possibly cut where the ellipsis starts.
        *whole, cut = drawn.rstrip().removesuffix("…").split()
        assert len(whole) > 5 and whole == words.split()[: len(whole)]
        assert words.split()[len(whole)].startswith(cut)


@pytest.mark.parametrize(("description", "size"), [("", SIZE), ("two users", (80, 24))])
async def test_the_description_line_is_not_drawn_when_empty_or_short(
    description: str, size: tuple[int, int]
) -> None:
    app = described_app(description)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        line = app.query_one(DescriptionLine)
        assert not line.region.height
        status = app.query_one("#status")
        assert app.query_one("#panes").region.y == status.region.bottom
        assert "two users" not in str(status.content)


async def test_the_palette_key_follows_resizes() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:

        async def palette_shown(width: int) -> bool:
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            return ("ctrl+p", "palette") in footer_keys(app)

        assert await palette_shown(120)
        assert not await palette_shown(80)
        assert await palette_shown(120)
        assert not await palette_shown(100)
        assert await palette_shown(110)
        assert not await palette_shown(109)


def test_the_sparkline_never_touches_a_number_and_the_lines_fit() -> None:
    # At 60 columns the pieces after "of 300" were left out and the sparkline followed it:
    # "of 300▇█▇". A space keeps them apart, counted in the width.
    session = Session(default_scenario())
    while session.can_step():
        session.step()
        view = View(session.snapshot(), session.log())
        for width in range(30, 130):
            lines = render_status(view, [1, 2, 3, 4, 5], width).plain.splitlines()
            assert all(len(line) <= width for line in lines), (width, lines)
            assert not re.search(r"\d[▁▂▃▄▅▆▇█]", lines[1]), (width, lines[1])
