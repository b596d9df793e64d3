"""What a newcomer tripped over at small and large sizes (issue 26): legends, cut values,
screenshots, the add form, quitting with unsaved history, very large blocks."""

from __future__ import annotations

import io
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.style import Style as RichStyle
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

from deepinfer_tui import export_worker
from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.cli import debugger
from deepinfer_tui.cli.program import main
from deepinfer_tui.columns import COLUMNS, ORDERS
from deepinfer_tui.document import snapshot_document
from deepinfer_tui.export import export_all
from deepinfer_tui.legend import (
    BLOCK_MARKS,
    CACHE_HUE,
    COLD_STYLE,
    FINISHED_HUE,
    HOT_STYLE,
    WARM_STYLE,
)
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import BlockMap, CommitLog, RequestTable, StatusBar
from deepinfer_tui.widgets.pool_strip import pool_header
from deepinfer_tui.widgets.status import render_status, widest_first_line
from deepinfer_tui.widgets.view import View, frame_views
from tests.app import tour
from tests.app.helpers import make_app, messages, wait_until

NARROW = (60, 20)


def drawn(widget: Widget) -> list[str]:
    """The widget's lines as drawn, border included, trailing spaces dropped."""
    size = widget.outer_size
    return [strip.text.rstrip() for strip in widget.render_lines(Region(0, 0, *size))]


async def test_no_legend_entry_is_split_between_two_lines() -> None:
    app = make_app()
    for width in (60, 67, 74, 81):
        async with app.run_test(size=(width, 40)) as pilot:
            blocks = app.query_one(BlockMap)
            lines = []
            for row in range(blocks.max_scroll_y + 1):  # every row, a screenful at a time
                blocks.scroll_y = row
                await pilot.pause()
                lines += drawn(blocks)
            for name, mark in BLOCK_MARKS.items():
                entry = f"{mark.symbol} {name}"
                assert any(entry in line for line in lines), (width, entry, lines)
            assert any("‹n› window" in line for line in lines), (width, lines)
            assert any("a slot × rolled back, · empty" in line for line in lines), lines
        app = make_app()


async def test_a_narrow_screen_leaves_out_whole_columns_and_header_pieces() -> None:
    app = make_app()
    async with app.run_test(size=NARROW) as pilot:
        while app.session.can_step():
            await pilot.press("space")
        header = drawn(app.query_one(StatusBar))
        assert not any("…" in line for line in header), header  # no number cut short
        table = app.query_one(RequestTable)
        lines = drawn(table)
        headers = list(table.headers)
        assert " ".join(headers) in " ".join(lines[1].split())  # every shown header whole
        for request_id in ("request-1", "request-3"):
            cells = [cell.plain for cell in table.get_row(request_id)]
            (line,) = [line for line in lines if f" {request_id} " in line]
            assert all(f" {cell}" in line for cell in cells), (cells, line)
        assert len(headers) < len(COLUMNS)  # this pane is too narrow for all of them
    async with make_app().run_test(size=(120, 40)) as pilot:
        assert len(pilot.app.query_one(RequestTable).columns) == len(COLUMNS)


async def test_a_second_screenshot_holds_no_toast_of_the_first(tmp_path: Path) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert any("Screenshot saved" in m for m in messages(app))  # the toast is up
        await pilot.press("space", "ctrl+s")
        await pilot.pause()
        second = tmp_path / "default-t0001-screen.svg"
        assert "Screenshot" not in second.read_text(encoding="utf-8")


async def test_the_header_says_an_export_is_being_written_until_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    real_export = export_worker.export_all

    def slow_export(session: Session, directory: Path, **options: Any) -> list[Path]:
        release.wait(10)
        return real_export(session, directory, **options)

    monkeypatch.setattr(export_worker, "export_all", slow_export)
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        status = app.query_one(StatusBar)
        await pilot.press("e")
        assert "writing the export" in str(status.content)
        release.set()
        assert await wait_until(pilot, lambda: any("Wrote" in m for m in messages(app)))
        await pilot.pause()
        assert "export" not in str(status.content)


async def test_the_add_form_counts_tokens_from_one_in_every_error() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a", *"1,2,99", "enter")
        form = app.screen
        assert isinstance(form, AddRequestScreen)
        assert form.error.startswith("✗ token 3 = 99 is outside the vocabulary"), form.error
        await pilot.press("backspace", "backspace", *"x", "enter")
        assert form.error == "✗ prompt: token 3 must be a whole number, got 'x'"


def test_a_whole_scenarios_replay_header_keeps_one_form_at_every_width() -> None:
    # The counts change from frame to frame too (◌9 queued, then ◌10): the form is the one
    # the widest frame needs, at every width.
    recorded = Session(default_scenario())
    while recorded.can_step():
        recorded.step()
    replay = Replay(parse_trace(trace_data(recorded)))
    views = list(frame_views(replay.frames))
    widest = widest_first_line(views)
    forms = set()
    for width in range(96, 140):
        long_form = set()
        for view in views:
            shown = replace(view, replay=replace(view.replay, header_width=widest))
            first = render_status(shown, [], width).plain.splitlines()[0]
            long_form.add("read-only" in first)
        assert len(long_form) == 1, width
        forms |= long_form
    assert forms == {True, False}


async def test_a_replay_header_keeps_one_form_from_frame_to_frame() -> None:
    recorded = Session(default_scenario())
    recorded.step()
    recorded.rollback("request-1", 1)
    recorded.step()
    recorded.advance_clock(1.0)
    recorded.step()
    replay = Replay(parse_trace(trace_data(recorded)))
    app = DebuggerApp(replay.session, replay=replay)
    async with app.run_test(size=(120, 40)) as pilot:
        forms = set()
        for width in (100, 110, 130):
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            while replay.position:
                await pilot.press("left")
            long_form = []
            for _ in replay.frames:
                first = drawn(app.query_one(StatusBar))[0]
                long_form.append("read-only" in first)
                await pilot.press("right")
            assert len(set(long_form)) == 1, (width, long_form)
            forms |= set(long_form)
        assert forms == {True, False}  # the widths span both forms


async def test_a_request_added_by_hand_is_named_apart_from_the_scenarios() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "a")
        form = " ".join(str(static.content) for static in app.screen.query(Static))
        assert "named user-1" in form
        await pilot.press(*"5,6,7", "enter")
        assert app.selected_id == "user-1"  # not request-7: the scenario keeps its names
        await pilot.press("a", *"5,6", "enter")
        assert app.selected_id == "user-2"
        scenario_ids = {r["id"] for r in app.session.snapshot()["requests"]} - {"user-1", "user-2"}
        assert all(i.startswith("request-") for i in scenario_ids)


async def test_q_asks_once_before_losing_unexported_hand_made_history(tmp_path: Path) -> None:
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space", "c", "q")
        await pilot.pause()
        assert app.is_running  # asked instead
        (question,) = [m for m in messages(app) if "press q again" in m]
        assert "a cancel made by hand" in question
        await pilot.press("q")
        assert await wait_until(pilot, lambda: not app.is_running)
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "a", *"5,6", "enter", "e")
        assert await wait_until(pilot, lambda: any("Wrote" in m for m in messages(app)))
        await pilot.press("space", "q")  # exported, then only stepped: nothing to lose
        assert await wait_until(pilot, lambda: not app.is_running)


async def test_blocks_larger_than_the_screen_are_warned_of_and_drawn_as_rows() -> None:
    scenario = default_scenario().with_overrides(block_size=1000, num_blocks=8)
    app = DebuggerApp(Session(scenario))
    async with app.run_test(size=NARROW) as pilot:
        (warning,) = [m for m in messages(app) if "1,000 slots" in m]
        assert "one row" in warning
        await pilot.press("space", "space")
        lines = str(app.query_one(BlockMap).table).splitlines()
        assert any("positions 0–999" in line for line in lines), lines
        assert max(len(line) for line in lines) < 100, lines  # no slot by slot row
        pool = pool_header(View(app.session.snapshot(), app.session.log()))
        assert pool.startswith("pool · 8 blocks × 1,000 slots"), pool  # grouped, as elsewhere
    small_blocks = make_app()
    async with small_blocks.run_test(size=NARROW):
        assert not [m for m in messages(small_blocks) if "slots" in m]


def test_the_program_warns_of_large_blocks_before_the_slow_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = []
    monkeypatch.setattr(debugger, "interactive", lambda: True)
    monkeypatch.setattr(debugger, "run_app", lambda session, **_: started.append(session) or 0)
    monkeypatch.setattr(debugger.shutil, "get_terminal_size", lambda: os.terminal_size((80, 24)))
    assert main(["--block-size", "1000", "--num-blocks", "8"]) == 0
    assert started and "warning: blocks of 1,000 slots" in capsys.readouterr().err
    assert main(["--block-size", "16"]) == 0
    assert "warning" not in capsys.readouterr().err


def long_prompt_app() -> DebuggerApp:
    prompt = [(7 * i) % 32 for i in range(60)]  # 15 blocks of 4
    document = {
        **default_scenario().to_dict(),
        "events": [{"tick": 0, "submit": {"id": "long", "prompt": prompt, "max_tokens": 6}}],
    }
    return DebuggerApp(Session(parse_scenario(document)))


async def test_a_long_request_gets_a_compact_block_table() -> None:
    app = long_prompt_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space")
        (request,) = app.session.snapshot()["requests"]
        lines = str(app.query_one(BlockMap).table).splitlines()
        block_rows = [line for line in lines if line.startswith("#")]
        assert len(block_rows) < len(request["blocks"]) / 2, lines
        (folded,) = [line for line in block_rows if "blocks alike" in line]
        assert folded.startswith("#") and "positions 0–" in folded
        # The window's block keeps its row, slot by slot; the folded ones end before it.
        assert any("‹" in line and "]" in line for line in block_rows), block_rows
        folded_last = int(folded.split("positions 0–")[1].split(" ")[0])
        assert folded_last < request["window"][0]
    app = make_app()  # short requests keep the slot-level table
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")
        lines = str(app.query_one(BlockMap).table).splitlines()
        assert any(line.startswith("#0  [  1 ‹ 2›‹ 3›‹ 4›] ref 2") for line in lines), lines


async def test_a_shared_block_says_who_holds_it() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space")
        lines = str(app.query_one(BlockMap).table).splitlines()
        (shared,) = [line for line in lines if "▓ shared" in line]
        assert shared.endswith("▓ shared (request-1, cache)"), shared


async def test_a_folded_run_of_shared_blocks_and_the_export_say_who_holds_them() -> None:
    prompt = [(7 * i) % 32 for i in range(60)]  # 15 blocks of 4, cached by a, hit by b
    document = {
        **default_scenario().to_dict(),
        "events": [
            {"tick": 0, "submit": {"id": "a", "prompt": prompt, "max_tokens": 2}},
            {"tick": 3, "submit": {"id": "b", "prompt": [*prompt, 1, 2, 3], "max_tokens": 6}},
        ],
    }
    app = DebuggerApp(Session(parse_scenario(document)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(*["space"] * 5)
        await tour.select(pilot, "b")
        lines = str(app.query_one(BlockMap).table).splitlines()
        (folded,) = [line for line in lines if "blocks alike" in line]
        assert folded.endswith("▓ shared (b, cache×3)"), folded  # b and a's 3 entries
        snapshot = app.session.snapshot()
    text = Console(width=160, record=True, file=io.StringIO())
    text.print(snapshot_document(snapshot, app.session.log()))
    shared = [line for line in text.export_text().splitlines() if " ▓ shared (" in line]
    assert len(shared) == 15 and all("▓ shared (b, cache×3)" in line for line in shared)


def line_colour(app: DebuggerApp, widget: Widget, words: str) -> tuple[int, int, int]:
    """The colour a drawn line holding `words` has, as the terminal shows it in this theme."""
    for strip in widget.render_lines(Region(0, 0, *widget.outer_size)):
        if words in strip.text:
            (segment,) = [s for s in strip if s.text.strip() and words.split()[0] in s.text]
            assert segment.style is not None and segment.style.color is not None
            return tuple(segment.style.color.get_truecolor(app.ansi_theme))
    raise AssertionError(f"no line with {words!r}")


async def test_red_is_for_loss_alone_the_cache_has_its_own_hue_in_every_theme() -> None:
    app = make_app()
    async with app.run_test(size=(120, 60)) as pilot:
        log = app.query_one(CommitLog)

        async def apart(words: str) -> None:
            for theme in ("textual-dark", "textual-light"):
                app.theme = theme
                await pilot.pause()
                other = line_colour(app, log, words)
                published = line_colour(app, log, "publish ")
                distance = sum((a - b) ** 2 for a, b in zip(other, published)) ** 0.5
                assert distance > 100, (theme, words, other, published)

        await pilot.press("space", "space")
        await apart("finished: cancelled")  # loss
        while not any("finished: length" in line for line in log.lines):
            await pilot.press("space")
        await apart("finished: length")  # the end: neither loss nor the cache


async def test_the_cache_and_finished_hues_read_on_either_themes_background() -> None:
    # Issue 26 asks to check the theme switch: steel_blue1 (cold) read 1.26 on the light one.
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            background = app.screen.styles.background.rgb
            for style in (CACHE_HUE, HOT_STYLE, WARM_STYLE, COLD_STYLE, FINISHED_HUE):
                colour = RichStyle.parse(style).color
                assert colour is not None
                rgb = tuple(colour.get_truecolor(app.ansi_theme))
                assert contrast(rgb, background) >= 2.8, (theme, style, rgb, background)


async def test_the_help_legend_defines_the_tables_and_headers_words_and_the_jargon() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        legend = str(app.screen.query_one("#help-legend", Static).content)
        for term in ("↺N", "hot4", "warm4", "acc/prop", "out/max", "blk", "retained"):
            assert term in legend, term
        for jargon in ("hot cursor", "consumers replayed", "graph size", "reverse"):
            assert jargon in legend, jargon


def test_the_export_uses_the_screens_words(tmp_path: Path) -> None:
    session = Session(default_scenario())
    for _ in range(3):
        session.step()
    (text_file,) = [p for p in export_all(session, tmp_path) if p.suffix == ".txt"]
    text = text_file.read_text(encoding="utf-8")
    for header in ("request", "state", "cache", "out/max", "acc/prop", "blk", "finish"):
        assert f" {header} " in text, header
    assert " hot4 " in text and " hot 4 " not in text


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(one: tuple[int, int, int], two: tuple[int, int, int]) -> float:
    """WCAG's contrast ratio of two colours."""
    high, low = sorted((_luminance(one), _luminance(two)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _contrast(app: DebuggerApp, segment: Any) -> float:
    """The WCAG contrast of a drawn segment's text on its background, in this theme."""
    fg = segment.style.color.get_truecolor(app.ansi_theme)
    bg = segment.style.bgcolor.get_truecolor(app.ansi_theme)
    return contrast(tuple(fg), tuple(bg))


async def test_a_footer_key_that_cannot_act_now_is_clearly_dim() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            shown = {}
            for key in app.screen.query("FooterKey"):
                if key.region.width and key.key in ("u", "space"):  # undo: nothing to undo yet
                    (strip,) = key.render_lines(key.region.reset_offset)
                    segments = [s for s in strip if s.text.strip()]
                    shown[key.key] = [_contrast(app, s) for s in segments]
            assert app.check_action("undo", ()) is None and app.check_action("step", ())
            for dim, lit in zip(shown["u"], shown["space"]):
                assert dim < 2.5 and dim < 0.7 * lit, (theme, shown)


def evicting_app() -> DebuggerApp:
    """a publishes its prefix, b's prompt evicts it, c comes with a's prefix: cold."""
    document = {**default_scenario().to_dict()}
    document["config"] = {**document["config"], "num_blocks": 7}
    document["events"] = [
        {"tick": 0, "submit": {"id": "a", "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 2}},
        {"tick": 3, "submit": {"id": "b", "prompt": list(range(10, 32)), "max_tokens": 2}},
        {"tick": 6, "submit": {"id": "c", "prompt": [*range(1, 10)], "max_tokens": 2}},
    ]
    return DebuggerApp(Session(parse_scenario(document)))


async def test_a_requests_log_keeps_the_evictions_behind_its_cold_restore() -> None:
    app = evicting_app()
    async with app.run_test(size=(120, 40)) as pilot:
        while app.session.can_step():
            await pilot.press("space")
        await tour.select(pilot, "c")
        await pilot.press("f")
        lines = app.query_one(CommitLog).lines
        assert any(line.startswith("t6 c restore cold") for line in lines), lines
        evictions = [line for line in lines if " evict " in line]
        assert len(evictions) == 2 and all(line.startswith("t3 ") for line in evictions)
        assert not any(line.startswith("t3 b ") for line in lines)  # b's own lines stay out


async def test_the_log_shows_one_kind_of_event_at_a_time() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space", "space", "k")
        log = app.query_one(CommitLog)
        assert log.lines and all(" commit " in line for line in log.lines), log.lines
        events = len(app.session.log())
        assert f"only commit · {len(log.lines)} of {events} events (k: next kind)" in str(
            log.border_title
        )
        await pilot.press("k")
        assert log.lines and all(" restore " in line for line in log.lines), log.lines
        while log.kind != "preempt":
            await pilot.press("k")
        # None yet in this scenario: the title says so, as the pane is blank.
        assert not log.lines and f"only preempt · 0 of {events} events" in str(log.border_title)
        while log.kind is not None:
            await pilot.press("k")
        assert any(" verify:" in line for line in log.lines)


async def test_the_log_keeps_its_place_while_the_user_reads_above() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(4):
            await pilot.press("space")
        log = app.query_one(CommitLog)
        assert log.max_scroll_y > 0
        log.focus()
        await pilot.press("home")
        await pilot.press("space")
        assert log.scroll_y == 0 and log.max_scroll_y > 0  # still where the user read
        await pilot.press("end", "space")
        assert log.scroll_y == log.max_scroll_y  # back at the bottom: it follows again
        await pilot.press("home")
        app.simulate_key("end")  # and a round at once, as a person presses end then space
        app.simulate_key("space")
        assert await wait_until(pilot, lambda: app.session.engine.tick == 6)
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y  # end goes to the bottom at once, and follows


def table_ids(table: RequestTable) -> list[str]:
    return table.row_keys


async def test_the_request_table_shows_prompt_lengths_sorts_and_filters_by_state() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("space", "space")  # two running, one finished
        table = app.query_one(RequestTable)
        requests = {r["id"]: r for r in app.session.snapshot()["requests"]}
        for request_id, request in requests.items():
            assert table.get_cell(request_id, "prompt").plain == str(len(request["prompt"]))
        submitted = table_ids(table)
        await pilot.press("o")  # by prompt length, longest first
        lengths = [len(requests[i]["prompt"]) for i in table_ids(table)]
        assert lengths == sorted(lengths, reverse=True) and set(table_ids(table)) == set(submitted)
        assert "by prompt" in str(table.border_title)
        await pilot.press("s")  # only running ones, still by prompt
        running = [i for i, r in requests.items() if r["status"] == "running"]
        assert sorted(table_ids(table)) == sorted(running) and running
        await pilot.press("space")  # a round later the filter holds
        now = {r["id"]: r["status"] for r in app.session.snapshot()["requests"]}
        assert all(now[i] == "running" for i in table_ids(table))
        await pilot.press("s")  # queued: none is, a round later
        assert not table_ids(table)
        assert str(table.border_title) == f"Requests · by prompt · only queued · 0 of {len(now)}"
        await pilot.press("s", "s")  # finished, then all again
        for _ in ORDERS:
            await pilot.press("o")
        assert table_ids(table) == list(now) and str(table.border_title) == "Requests"


async def test_the_request_table_sorts_by_priority_the_first_admitted_first() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for priority in (5, -2, 3):
            app.session.submit([1, 2], max_tokens=2, priority=priority)
        await pilot.press("space")
        table = app.query_one(RequestTable)
        for _ in ORDERS:  # o steps through the orders; priority is one of them
            if "by priority" in str(table.border_title):
                break
            await pilot.press("o")
        assert "by priority" in str(table.border_title)
        priorities = {r["id"]: r["priority"] for r in app.session.snapshot()["requests"]}
        shown = [priorities[i] for i in table_ids(table)]
        assert shown == sorted(shown) and shown[0] == -2 and shown[-1] == 5
