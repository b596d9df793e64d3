"""Screen snapshots of the views beside the block map (issue 25) at 120x40 and 80x24.

A scenario with a 4-row token budget chunks the prompts and keeps requests waiting; the
engine's clock is injected, so the same code renders the same SVG. Regenerate after an
intended change with `--snapshot-update` and look at the report.
"""

from __future__ import annotations

from typing import Any

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.tour import SMALL, WIDE

ROUNDS = ["space"] * 8


def crowded_app() -> DebuggerApp:
    return DebuggerApp(Session(default_scenario().with_overrides(token_budget=4)))


def test_timeline_view(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=WIDE, press=[*ROUNDS, "3", "down"])


def test_metrics_view(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=WIDE, press=[*ROUNDS, "5"])


# Each view at 80x24 too, and the round view (key 4) and the prefix cache (key 2) of the
# same crowded session: one snapshot per visible state.
def test_timeline_view_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=SMALL, press=[*ROUNDS, "3", "down"])


def test_metrics_view_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=SMALL, press=[*ROUNDS, "5"])


def test_round_view(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=WIDE, press=[*ROUNDS, "4"])


def test_round_view_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=SMALL, press=[*ROUNDS, "4"])


def test_cache_view_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(crowded_app(), terminal_size=SMALL, press=[*ROUNDS, "2"])
