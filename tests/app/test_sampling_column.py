"""The request table's sampling column: its text for crafted request views, its place among
the columns a narrow pane drops, and the export's request table."""

from __future__ import annotations

from typing import Any

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.columns import COLUMNS, request_cells
from deepinfer_tui.export import render_document
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import RequestTable

KEYS = [column.key for column in COLUMNS]


def view(sampling: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": "r", "status": "queued", "max_tokens": 4, "sampling": sampling}


def sampling_cell(sampling: dict[str, Any] | None) -> tuple[str, str]:
    return request_cells(view(sampling))[KEYS.index("sampling")]


@pytest.mark.parametrize(
    ("sampling", "text"),
    [
        (None, "greedy"),
        ({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": None}, "greedy"),
        # Greedy whatever else is set: temperature 0 is the argmax.
        ({"temperature": 0.0, "top_k": 5, "top_p": 0.5, "seed": 3}, "greedy"),
        ({"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 123}, "T0.8 k20 p0.9 s123"),
        ({"temperature": 0.8, "top_k": 0, "top_p": 1.0, "seed": 123}, "T0.8 s123"),
        ({"temperature": 1.0, "top_k": 0, "top_p": 0.25, "seed": 0}, "T1 p0.25 s0"),
        ({"temperature": 2.5, "top_k": 3, "top_p": 1.0, "seed": 7}, "T2.5 k3 s7"),
    ],
)
def test_the_sampling_cell_names_only_the_settings_in_use(
    sampling: dict[str, Any] | None, text: str
) -> None:
    assert sampling_cell(sampling)[0] == text


def test_greedy_is_dimmed_and_a_sampled_request_is_not() -> None:
    assert sampling_cell(None)[1] == "bright_black"
    assert sampling_cell({"temperature": 0.8, "top_k": 0, "top_p": 1.0, "seed": 1})[1] == ""


def test_a_view_without_sampling_reads_greedy() -> None:
    cells = request_cells({"id": "r", "status": "queued", "max_tokens": 4})
    assert cells[KEYS.index("sampling")][0] == "greedy"


@pytest.mark.parametrize(("width", "absent"), [(80, {"priority", "sampling"}), (120, set())])
async def test_a_narrow_table_keeps_why_a_request_finished_over_its_sampling(
    width: int, absent: set[str]
) -> None:
    # At 80 columns the table cannot hold every column: the priority and the sampling (fixed
    # at submit) give way, the finish reason (a cancel, not an error) and the counts stay.
    app = DebuggerApp(Session(default_scenario()))
    async with app.run_test(size=(width, 24)) as pilot:
        await pilot.press("space", "space")  # round 2: request-3 was cancelled while queued
        await pilot.pause()
        table = app.query_one(RequestTable)
        shown = set(table.columns)
        assert shown == set(KEYS) - absent
        assert "cancelled" in [str(cell) for cell in table.get_row("request-3")]


def test_the_priority_cell_is_the_views_priority() -> None:
    cells = request_cells({**view(None), "priority": -3})
    assert cells[KEYS.index("priority")] == ("-3", "")
    assert request_cells(view(None))[KEYS.index("priority")][0] == "0"


def test_the_export_shows_the_sampling_column() -> None:
    session = Session(default_scenario())
    session.submit([5, 6], max_tokens=2, sampling={"temperature": 0.7, "top_k": 4, "seed": 42})
    text = render_document(session)["txt"]
    assert "sampling" in text
    assert "T0.7 k4 s42" in text
    assert "greedy" in text  # the scenario's own requests
