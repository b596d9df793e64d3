"""Traces recorded before the engine was split into components replay exactly after it.

Each fixture was saved by the engine as it stood before the restructure: the built-in
scenario, a branching draft tree, and a small pool with preemptions, undo and a rollback. The
first two are version-1 traces (before the token budget): they replay through the comparison
of events as version 1 recorded them; in the tree's `verify` events the children of rejected
nodes were edited from "rejected" to "discarded" when that verdict came in (issue 23), nothing
else. The third was recorded again (version 2) when a preempted request began offering its
computed prefix to the cache, which changes what later rounds do.
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


def test_old_and_new_trace_versions_are_both_among_them() -> None:
    versions = {path.name: load_trace(path).version for path in TRACES}
    assert versions == {
        "default.trace.json": 1,
        "preempt-undo.trace.json": 2,
        "tree.trace.json": 1,
    }


@pytest.mark.parametrize("path", TRACES, ids=lambda path: path.name.split(".")[0])
def test_a_golden_trace_replays_exactly(path: Path) -> None:
    replay = Replay(load_trace(path), frames=False)
    assert replay.divergence is None
    assert replay.executed == len(replay.trace.operations)
