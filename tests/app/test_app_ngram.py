"""The debugger over an n-gram drafting scenario: it steps, draws the draft trees the lookup
proposed, undoes and exports, at 80x24 as on a wide screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.cli.common import oracle_check
from deepinfer_tui.scenario import parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import DraftTree, RequestTable

from .helpers import wait_until
from .test_scenario_ngram import ngram_scenario


def tree_labels(tree: DraftTree) -> list[str]:
    labels, pending = [], [tree.root]
    while pending:
        node = pending.pop()
        labels.append(str(node.label))
        pending.extend(node.children)
    return labels


@pytest.mark.parametrize("size", [(80, 24), (140, 40)])
async def test_the_app_runs_an_ngram_scenario_and_draws_its_trees(
    size: tuple[int, int], tmp_path: Path
) -> None:
    app = DebuggerApp(Session(parse_scenario(ngram_scenario(), "n.json")), export_dir=tmp_path)
    async with app.run_test(size=size) as pilot:
        drawn = []
        for _ in range(6):
            await pilot.press("space")
            request = app.view.request("request-1")
            assert request is not None
            if request.get("tree") and len(request["tree"]["nodes"]) > 1:
                # A line per node of the lookup's chain (and the root), each with its token;
                # the replacement or bonus token the target chose may add one.
                labels = tree_labels(app.query_one(DraftTree))
                drawn.append(labels)
                assert len(labels) >= len(request["tree"]["nodes"])
                for node in request["tree"]["nodes"][1:]:
                    assert any(f" {node['token']}" in label for label in labels), labels
        assert drawn, "the repeating prompt should have been drafted by lookup"
        await pilot.press("u")  # undo a round of n-gram drafts
        assert app.engine.tick == 5
        table = app.query_one(RequestTable)
        assert table.row_count == 3
        while app.session.can_step():
            await pilot.press("space")
        assert oracle_check(app.session)["passed"]
        await pilot.press("e")  # the export's trace, and its document with the trees
        assert await wait_until(pilot, lambda: any(tmp_path.glob("*.trace.json")))
        assert await wait_until(pilot, lambda: any(tmp_path.glob("*.txt")))
    (text,) = tmp_path.glob("*.txt")
    assert "greedy" in text.read_text() and "T0.9 k6 s4" in text.read_text()


async def test_before_its_first_lookup_an_ngram_request_is_not_called_greedy() -> None:
    app = DebuggerApp(Session(parse_scenario(ngram_scenario(), "n.json")))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        request = app.view.request("request-1")
        assert request is not None and not request.get("tree")  # nothing drafted yet
        label = str(app.query_one(DraftTree).root.label)
        assert label == "no draft round yet"
