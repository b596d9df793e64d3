"""The add-request form's sampling and priority fields, typed with real keys."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.replay import Replay
from deepinfer_tui.screens.add_request import AddRequestScreen
from deepinfer_tui.screens.form import FormError
from deepinfer_tui.tracefile import parse_trace, trace_data
from deepinfer_tui.widgets import RequestTable

from .helpers import make_app, wait_until

SMALL = (80, 24)
WIDE = (140, 40)
# The fields after the prompt, in tab order.
FIELDS = ("max-tokens", "eos", "temperature", "top-k", "top-p", "seed", "priority")


async def fill(pilot: Pilot[Any], prompt: str, **typed: str) -> None:
    """Open the form, type the prompt, then each field given (by id, `_` for `-`), moving
    between fields with tab."""
    await pilot.press("a")
    assert isinstance(pilot.app.screen, AddRequestScreen)
    await pilot.press(*prompt)
    for field in FIELDS:
        await pilot.press("tab")
        text = typed.get(field.replace("-", "_"))
        if text is not None:
            await pilot.press("ctrl+a", "ctrl+k", *text)


def added(app: DebuggerApp) -> dict[str, Any]:
    (request,) = [r for r in app.session.snapshot()["requests"] if r["id"].startswith("user-")]
    return request


async def test_the_form_submits_the_sampling_and_priority_typed_into_it() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(
            pilot, "7,8,9", temperature="0.8", top_k="20", top_p="0.9", seed="123", priority="3"
        )
        await pilot.press("enter")
        assert not isinstance(app.screen, AddRequestScreen)
        request = added(app)
        assert request["prompt"] == [7, 8, 9]
        assert request["sampling"] == {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 123}
        assert request["priority"] == 3
        table = app.query_one(RequestTable)
        assert table.get_cell(request["id"], "sampling").plain == "T0.8 k20 p0.9 s123"
        assert table.get_cell(request["id"], "priority").plain == "3"
        # The session records what the engine took, so a trace submits the same again.
        submit = app.session.operations[-1]
        assert submit["op"] == "submit" and submit["priority"] == 3
        assert submit["sampling"] == request["sampling"]


async def test_empty_sampling_fields_are_greedy_and_priority_zero() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(pilot, "4,5")
        await pilot.press("enter")
        request = added(app)
        assert request["sampling"]["temperature"] == 0.0 and request["priority"] == 0
        assert app.query_one(RequestTable).get_cell(request["id"], "sampling").plain == "greedy"
        assert "sampling" not in app.session.operations[-1]


async def test_a_seed_left_empty_is_drawn_recorded_and_replays_exactly() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(pilot, "3,1,4,1,5", max_tokens="6", temperature="1.5", top_k="8")
        await pilot.press("enter")
        request = added(app)
        seed = request["sampling"]["seed"]
        assert isinstance(seed, int)
        cell = app.query_one(RequestTable).get_cell(request["id"], "sampling").plain
        assert cell == f"T1.5 k8 s{seed}"
        assert app.session.operations[-1]["sampling"]["seed"] == seed
        app.session.run()
        tokens = app.session.engine.result(request["id"]).tokens
    replay = Replay(parse_trace(trace_data(app.session)), frames=False)
    assert replay.reproduced
    assert replay.session.engine.result(request["id"]).tokens == tokens


async def test_the_add_button_clicked_submits_the_form_too() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(pilot, "1,2", temperature="0.5", seed="9")
        await pilot.click("#add")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, AddRequestScreen))
        assert added(app)["sampling"] == {
            "temperature": 0.5,
            "top_k": 0,
            "top_p": 1.0,
            "seed": 9,
        }


async def test_every_field_is_reachable_in_a_small_terminal() -> None:
    """At 80x24 the form scrolls: the field with focus is always on screen."""
    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("a", *"2,3")
        screen = app.screen
        for field in FIELDS:
            await pilot.press("tab")
            widget = screen.query_one(f"#{field}", Input)
            assert widget.has_focus
            region = widget.region
            assert region.height and 0 <= region.y < SMALL[1] and region.right <= SMALL[0]
        await pilot.press("ctrl+a", "ctrl+k", "4", "enter")
        assert added(app)["priority"] == 4


# Each field's refusals are read in test_request_form.py; here the screen shows them.
@pytest.mark.parametrize(
    ("typed", "problem", "field"),
    [
        ({"temperature": "hot"}, "temperature must be a number, got 'hot'", "temperature"),
        ({"temperature": "1", "top_k": "1.5"}, "top_k must be a whole number, got '1.5'", "top-k"),
        ({"priority": "high"}, "priority must be a whole number, got 'high'", "priority"),
    ],
)
async def test_a_bad_value_is_refused_in_the_form_and_its_field_takes_the_cursor(
    typed: dict[str, str], problem: str, field: str
) -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        before = app.session.snapshot()
        operations = list(app.session.operations)
        await fill(pilot, "1,2,3", **typed)  # leaves the cursor in the last field, priority
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, AddRequestScreen)  # still open, saying why
        assert problem in screen.error, screen.error
        assert app.session.snapshot() == before and app.session.operations == operations
        assert app.focused is not None and app.focused.id == field
        await pilot.press("backspace")  # an edit of the refused field may fix it: the error goes
        assert screen.error == ""


async def test_a_refused_field_takes_the_cursor_at_its_end_to_be_mended() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(pilot, "1,2,99")  # the cursor ends in the priority field
        await pilot.press("enter")
        assert app.screen.error.startswith("✗ token 3 = 99 is outside the vocabulary")
        await pilot.press("backspace", "enter")  # 1,2,9: nothing else of it lost
        assert added(app)["prompt"] == [1, 2, 9]


async def test_an_engine_refusal_sends_the_cursor_to_the_field_it_names() -> None:
    app = make_app()
    async with app.run_test(size=WIDE) as pilot:
        await fill(pilot, "1,99")  # out of the vocabulary: the engine refuses it
        await pilot.press("enter")
        assert app.screen.error.startswith("✗ token 2 = 99 is outside the vocabulary")
        assert app.focused is not None and app.focused.id == "prompt"
        await pilot.press("backspace", "enter")  # "1,9" is in it
        assert not isinstance(app.screen, AddRequestScreen)
        assert added(app)["prompt"] == [1, 9]


async def test_a_refusal_in_a_small_terminal_is_scrolled_into_view() -> None:
    app = make_app()
    async with app.run_test(size=SMALL) as pilot:
        await fill(pilot, "1,2", temperature="1", seed="-3")  # tabs on to the priority field
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, AddRequestScreen)
        error = screen.query_one(FormError)
        assert "seed must be None or an integer" in screen.error
        form = screen.query_one("#form")
        # The refusal is laid out and scrolled to on the next refreshes: wait for them.
        assert await wait_until(
            pilot, lambda: error.region.height and form.region.contains_region(error.region)
        )
        assert error.region.height and form.region.contains_region(error.region)
