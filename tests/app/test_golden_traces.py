"""Traces recorded before the engine was split into components replay exactly after it.

Each fixture was saved by the engine as it stood before the restructure: the built-in
scenario, a branching draft tree, and a small pool with preemptions, undo and a rollback.
"""

from pathlib import Path

import pytest

from deepinfer_tui.replay import Replay, load_trace

TRACES = sorted((Path(__file__).parent / "fixtures" / "traces").glob("*.trace.json"))


def test_the_three_golden_traces_are_there() -> None:
    assert [path.name for path in TRACES] == [
        "default.trace.json",
        "preempt-undo.trace.json",
        "tree.trace.json",
    ]


@pytest.mark.parametrize("path", TRACES, ids=lambda path: path.name.split(".")[0])
def test_a_golden_trace_replays_exactly(path: Path) -> None:
    replay = Replay(load_trace(path), frames=False)
    assert replay.divergence is None
    assert replay.executed == len(replay.trace.operations)
