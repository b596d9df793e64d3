"""Screen snapshots of the debugger at key moments of the default scenario.

Baselines live in tests/app/__snapshots__/; after an intended change to the screen or to the
engine's behaviour, regenerate them with
`python -m pytest tests/app/test_app_snapshots.py --snapshot-update` and look at the report.
The engine's clock is injected and nothing on screen blinks or depends on wall time, so the
same code renders the same SVG.
"""

from __future__ import annotations

from typing import Any

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.tour import LARGE, SMALL, WIDE, cancel, speculation, warm


def make_app() -> DebuggerApp:
    return DebuggerApp(Session(default_scenario()))


def test_start(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE)


def test_mid_speculation_with_a_rejected_branch(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=speculation)


def test_after_cancel(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=cancel)


def test_warm_restore(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, run_before=warm)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, press=["question_mark"])


def test_small_terminal_mid_speculation(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=speculation)


def test_large_terminal_mid_speculation(snap_compare: Any) -> None:
    # From 150 columns the table and the detail panes share one row.
    assert snap_compare(make_app(), terminal_size=LARGE, run_before=speculation)
