"""The draft-tree pane and the export's draft trees show sampling verification (issue 23):
p, q, the draw and the acceptance probability per verified node, the replacement's
distribution, and the children of a rejected node as discarded with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.describe import describe
from deepinfer_tui.export import export_all
from deepinfer_tui.scenario import default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets import DraftTree
from deepinfer_tui.widgets.view import View
from engine import Engine, EngineConfig, NgramDrafter, TinyModel
from tests.app.tour import WIDE, select


def sampled_scenario(acceptance: str = "rejection") -> Session:
    """One request sampled at temperature 0.8; rejection sampling checks a chain."""
    data = default_scenario().to_dict()
    data["config"].update(draft_acceptance=acceptance, draft_branching=1)
    data["draft"]["noise"] = 0.6
    data["name"] = f"sampled-{acceptance}"
    data["description"] = f"One request sampled at temperature 0.8, verified by {acceptance}."
    data["events"] = [
        {
            "tick": 0,
            "submit": {
                "id": "request-1",
                "prompt": [1, 2, 3, 4],
                "max_tokens": 12,
                "sampling": {"temperature": 0.8, "seed": 3},
            },
        }
    ]
    return Session(parse_scenario(data))


def greedy_tree_scenario() -> Session:
    """The default scenario with bigger, noisier trees: at t3 request-2's rejected node has a
    verified child, discarded with it."""
    data = default_scenario().to_dict()
    data["config"]["max_draft_nodes"] = 12
    data["draft"]["noise"] = 0.6
    return Session(parse_scenario(data))


def pane_labels(app: App[Any]) -> list[str]:
    """Every label of the draft-tree pane, depth first."""
    labels, pending = [], [app.query_one(DraftTree).root]
    while pending:
        node = pending.pop(0)
        labels.append(str(node.label))
        pending[:0] = node.children
    return labels


def two_places(value: float) -> str:
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def request_view(app: DebuggerApp, request_id: str) -> dict[str, Any]:
    return next(r for r in app.view.snapshot["requests"] if r["id"] == request_id)


async def test_the_pane_shows_p_q_the_draw_and_the_replacements_distribution() -> None:
    app = DebuggerApp(sampled_scenario())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("space", "space")
        await pilot.pause()
        view = request_view(app, "request-1")
        nodes = view["tree"]["nodes"]
        rejected = [n for n in nodes if n["verdict"] == "rejected"]
        assert rejected and view["last_commit"]["outcome"] == "replacement"
        labels = pane_labels(app)
        for each in nodes:
            if each["verdict"] not in ("accepted", "rejected"):
                continue
            p, q, u = (two_places(each[key]) for key in ("p", "q", "draw"))
            sign = "<" if each["verdict"] == "accepted" else "≥"
            numbers = f"{each['token']} p{p} q{q} u{u}{sign}{two_places(each['accept_prob'])}"
            assert any(label.endswith(numbers) or f"{numbers} target" in label for label in labels)
        (source,) = [n for n in rejected if n.get("replacement_top")]
        replacement = view["last_commit"]["tokens"][-1]
        assert source["target_token"] == replacement
        at = labels.index(f"+ {replacement} replacement ~ max(p−q,0)")
        top = [f"{token} {two_places(share)}" for token, share in source["replacement_top"][:3]]
        assert labels[at + 1] == " · ".join(top)


async def test_a_rejected_nodes_verified_children_are_drawn_discarded() -> None:
    app = DebuggerApp(greedy_tree_scenario())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("space", "space", "space")
        await select(pilot, "request-2")
        await pilot.pause()
        nodes = request_view(app, "request-2")["tree"]["nodes"]
        discarded = [n for n in nodes if n["verdict"] == "discarded"]
        assert discarded, "the scenario was meant to discard a rejected node's child"
        labels = pane_labels(app)
        for each in discarded:
            parent = nodes[each["parent"]]
            assert parent["verdict"] in ("rejected", "discarded")
            (label,) = [
                label
                for label in labels
                if label.split()[1:2] == [str(each["token"])] and "discarded" in label
            ]
            assert label.startswith(f"⊘ {each['token']} ") and "target" not in label
        # Only the nodes the target judged are drawn rejected.
        rejected = sum(1 for label in labels if label.startswith("✗ "))
        assert rejected == sum(1 for n in nodes if n["verdict"] == "rejected")


def test_the_export_shows_the_checks_and_discarded_children(tmp_path: Path) -> None:
    session = sampled_scenario()
    session.step()
    session.step()
    (path,) = export_all(session, tmp_path, ["txt"])
    text = path.read_text(encoding="utf-8")
    (view,) = session.snapshot()["requests"]
    for each in view["tree"]["nodes"]:
        if each["verdict"] in ("accepted", "rejected"):
            p, q, u = (two_places(each[key]) for key in ("p", "q", "draw"))
            assert f"{each['token']} p{p} q{q} u{u}" in text
        if each["verdict"] == "discarded":
            assert f"⊘ {each['token']} discarded" in text
        if each.get("replacement_top"):
            top = " · ".join(f"{t} {two_places(s)}" for t, s in each["replacement_top"])
            assert f"replacement {each['target_token']} drawn from max(p−q,0): {top}" in text


def test_the_logs_verify_line_counts_the_discarded_nodes() -> None:
    session = greedy_tree_scenario()
    for _ in range(3):
        session.step()
    (event,) = [
        e
        for e in session.log()
        if e["kind"] == "verify" and e["request_id"] == "request-2" and e["tick"] == 3
    ]
    verdicts = [n["verdict"] for n in event["nodes"]]
    counts = {v: verdicts.count(v) for v in ("accepted", "rejected", "discarded", "unverified")}
    assert counts["discarded"] > 0
    words = ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
    assert describe(event) == f"t3 request-2 verify: {words}"


def test_the_exports_greedy_tree_draws_discarded_children_discarded(tmp_path: Path) -> None:
    session = greedy_tree_scenario()
    for _ in range(3):
        session.step()
    (path,) = export_all(session, tmp_path, ["txt"])
    text = path.read_text(encoding="utf-8")
    view = next(r for r in session.snapshot()["requests"] if r["id"] == "request-2")
    discarded = [n for n in view["tree"]["nodes"] if n["verdict"] == "discarded"]
    assert discarded
    for each in discarded:
        assert f"⊘ {each['token']} q{two_places(each['prob'])} discarded" in text


def test_snapshot_of_a_sampled_rejection_in_the_draft_tree(snap_compare: Any) -> None:
    assert snap_compare(DebuggerApp(sampled_scenario()), terminal_size=WIDE, press=["space"] * 2)


async def test_the_pane_highlights_the_ngram_drafters_match() -> None:
    class TreeOnly(App[None]):
        def compose(self) -> ComposeResult:
            yield DraftTree()

    engine = Engine(TinyModel(seed=3), NgramDrafter(1, 3), config=EngineConfig(draft_width=4))
    request_id = engine.submit([*range(12), 5, 6], max_tokens=8)
    app = TreeOnly()
    async with app.run_test(size=WIDE) as pilot:
        shown = 0
        while not engine.idle:
            engine.step()
            snapshot = engine.snapshot()
            app.query_one(DraftTree).show(View(snapshot, engine.trace), request_id)
            await pilot.pause()
            tree = snapshot["requests"][0]["tree"]
            if not (tree and tree.get("ngram") and tree["round"] == engine.tick):
                continue
            start, length = tree["ngram"]["start"], tree["ngram"]["length"]
            context = [*snapshot["requests"][0]["prompt"], *snapshot["requests"][0]["generated"]]
            matched = " ".join(str(t) for t in context[start : start + length])
            head, strip = pane_labels(app)[1:3]  # right below the root, before the nodes
            assert head.startswith(f"≡ n-gram [{matched}] at {start}")
            assert strip.startswith("context ") and strip.endswith(matched)
            shown += 1
        assert shown
