"""Draft trees (issue 4): greedy tree acceptance, the batched verification, the budget."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from engine.speculation import DraftTree, choose_budget, expand
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    drain,
    events_of,
    request_view,
    restore_of,
)

Event = dict[str, Any]


def rounds(engine: Engine) -> list[list[Event]]:
    """Step to idle, returning each round's events (invariants checked every round)."""
    out = []
    while not engine.idle:
        out.append(engine.step())
        check_block_invariants(engine)
        assert len(out) < 300, "engine never became idle"
    return out


def per_request(events: list[Event], kind: str) -> dict[str, Event]:
    return {e["request_id"]: e for e in events_of(events, kind)}


def selected_nodes(verify: Event) -> set[int]:
    judged = ("accepted", "rejected", "discarded")
    return {n["id"] for n in verify["nodes"] if n["verdict"] in judged}


def test_copy_draft_with_branching_accepts_the_greedy_path_and_rejects_siblings() -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, depth=target.depth, noise=0.0)
    config = EngineConfig(draft_width=4, draft_branching=2, max_draft_nodes=12)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    prompts = {engine.submit(p, max_tokens=12): p for p in ([1, 2, 3], [7, 5], [4, 4, 4, 4])}
    greedy = {rid: greedy_generate(target, p, max_tokens=12).tokens for rid, p in prompts.items()}
    rejected_siblings = 0
    done = dict.fromkeys(prompts, 0)  # tokens committed so far per request
    for events in rounds(engine):
        drafts, verifies = per_request(events, "draft"), per_request(events, "verify")
        for rid, commit in per_request(events, "commit").items():
            verdicts = {n["id"]: n for n in verifies[rid]["nodes"]}
            if rid in drafts:
                nodes = {n["id"]: n for n in drafts[rid]["nodes"]}
            else:  # nothing drafted (e.g. one token left): the tree is its root alone
                assert list(verdicts) == [0]
                nodes = {0: {"id": 0, "parent": -1, "token": None}}
            expected = greedy[rid][done[rid] :]  # what the target will say from this root
            done[rid] += len(commit["tokens"])
            accepted_path = []
            node = 0
            for token in expected:  # walk the greedy path down the tree
                children = [
                    c
                    for c in nodes.values()
                    if c["parent"] == node and verdicts[c["id"]]["verdict"] != "unverified"
                ]
                match = [c for c in children if c["token"] == token]
                for child in children:
                    if child["token"] == token:
                        assert verdicts[child["id"]]["verdict"] == "accepted"
                    else:
                        assert verdicts[child["id"]]["verdict"] == "rejected"
                        assert verdicts[child["id"]]["target_token"] == token
                        rejected_siblings += bool(match)
                if not match:
                    break
                node = match[0]["id"]
                accepted_path.append(node)
            on_path = set(accepted_path)
            for node_id, verdict in verdicts.items():
                if verdict["verdict"] == "accepted":
                    assert node_id in on_path
            assert commit["accepted"] == len(accepted_path)
            assert commit["outcome"] == "bonus"  # the draft is never wrong on a verified path
            assert commit["tokens"] == list(expected[: len(commit["tokens"])])
    assert rejected_siblings > 0, "no branch was ever rejected next to an accepted sibling"
    check_all_finished(engine)


@pytest.mark.parametrize(
    ("requests", "config"),
    [
        (1, dict(draft_width=3)),
        (3, dict(draft_width=4, draft_branching=2, max_batch_tokens=16)),
        (6, dict(draft_width=7, draft_branching=3, max_draft_nodes=16, max_batch_tokens=16)),
        (5, dict(draft_width=2, draft_branching=2, max_batch_tokens=3, block_size=1)),
    ],
)
def test_the_target_runs_one_forward_per_round(requests: int, config: dict[str, Any]) -> None:
    target = TinyModel(seed=2)
    draft = make_draft(target, seed=3)
    engine = Engine(target, draft, config=EngineConfig(**config), clock=ManualClock())
    for index in range(requests):
        engine.submit([1 + index, 2, 3 + index], max_tokens=7)
    most_nodes = 0
    while not engine.idle:
        target_calls, draft_calls = target.forward_calls, draft.forward_calls
        work = engine.metrics()["work"]
        events = engine.step()
        verifies = events_of(events, "verify")
        expected = 1 if verifies else 0
        assert target.forward_calls - target_calls == expected
        assert engine.metrics()["work"]["target_forwards"] - work["target_forwards"] == expected
        # The draft runs one forward per tree level, for all requests together.
        assert draft.forward_calls - draft_calls <= config["draft_width"]
        most_nodes = max(most_nodes, sum(len(selected_nodes(v)) + 1 for v in verifies))
    if requests > 1:
        assert most_nodes > 2  # several requests and nodes really shared one call
    check_all_finished(engine)


BUDGETS = [
    dict(max_batch_tokens=1, draft_width=3, draft_branching=2),
    dict(max_batch_tokens=2, draft_width=4, draft_branching=3, max_draft_nodes=5),
    dict(max_batch_tokens=5, draft_width=5, draft_branching=2),
    dict(max_batch_tokens=7, draft_width=7, draft_branching=1),
    dict(max_batch_tokens=16, draft_width=6, draft_branching=3, max_draft_nodes=9),
    dict(
        max_batch_tokens=8,
        draft_width=4,
        draft_branching=2,
        max_draft_nodes=6,
        cost_curve=((1, 1.0), (2, 1.2), (4, 1.4), (8, 2.5)),
    ),
]


@pytest.mark.parametrize("config", BUDGETS)
def test_budget_selects_prefix_closed_top_nodes_within_the_total(config: dict[str, Any]) -> None:
    target = TinyModel(seed=7)
    engine = Engine(target, make_draft(target, seed=8), config=EngineConfig(**config))
    for index in range(6):
        engine.submit([index, index + 1, 2], max_tokens=6)
    for events in rounds(engine):
        (budget,) = events_of(events, "budget")
        assert len(budget["per_request"]) == len(budget["requests"]) >= 1
        assert all(length >= 1 for length in budget["per_request"])  # every main position
        assert sum(budget["per_request"]) == budget["total"] <= config["max_batch_tokens"]
        drafts, verifies = per_request(events, "draft"), per_request(events, "verify")
        assert set(verifies) == set(budget["requests"])  # a big pool defers nobody
        verified_total = 0
        chosen, left_out = [], []
        for rid, length in zip(budget["requests"], budget["per_request"]):
            selected = selected_nodes(verifies[rid])
            verified_total += 1 + len(selected)
            assert 1 + len(selected) == length
            nodes = {n["id"]: n for n in drafts[rid]["nodes"]} if rid in drafts else {}
            for node in selected:  # prefix-closed: every chosen node's parent is chosen
                assert nodes[node]["parent"] == 0 or nodes[node]["parent"] in selected
            for node_id, node in nodes.items():
                if node_id:
                    (chosen if node_id in selected else left_out).append(node["path_prob"])
        assert verified_total <= config["max_batch_tokens"]
        if chosen and left_out:  # extra positions go to the most probable nodes overall
            assert min(chosen) >= max(left_out) - 1e-6
    check_all_finished(engine)


@pytest.mark.parametrize(
    "config",
    [
        dict(draft_width=1, draft_branching=3, max_draft_nodes=16),
        dict(draft_width=3, draft_branching=2, max_draft_nodes=4),
        dict(draft_width=7, draft_branching=3, max_draft_nodes=16),
        dict(draft_width=5, draft_branching=1, max_draft_nodes=2),
    ],
)
def test_draft_trees_respect_width_branching_and_node_cap(config: dict[str, Any]) -> None:
    target = TinyModel(seed=9)
    engine = Engine(target, make_draft(target, seed=2), config=EngineConfig(**config))
    ids = [engine.submit([3, 1, 4], max_tokens=9), engine.submit([2, 7], max_tokens=4)]
    branched = False
    for events in rounds(engine):
        for draft in events_of(events, "draft"):
            nodes = {n["id"]: n for n in draft["nodes"]}
            root = nodes[0]
            assert root["parent"] == -1 and root["depth"] == 0
            assert len(nodes) - 1 <= config["max_draft_nodes"]
            children: dict[int, list[dict]] = {}
            for node in nodes.values():
                if node["id"] == 0:
                    continue
                parent = nodes[node["parent"]]
                assert node["depth"] == parent["depth"] + 1 <= config["draft_width"]
                assert 0.0 <= node["prob"] <= 1.0
                assert node["path_prob"] == pytest.approx(
                    parent["path_prob"] * node["prob"], abs=1e-5
                )
                children.setdefault(parent["id"], []).append(node)
            for kids in children.values():
                assert len(kids) <= config["draft_branching"]
                assert len({k["token"] for k in kids}) == len(kids)  # top-k: distinct tokens
                branched |= len(kids) > 1
    if config["draft_branching"] > 1 and config["max_draft_nodes"] > 1:
        assert branched
    assert len(check_all_finished(engine)) == len(ids)


def test_snapshot_shows_the_last_rounds_tree_with_verdicts() -> None:
    target = TinyModel(seed=4)
    config = EngineConfig(draft_width=3, draft_branching=2)
    engine = Engine(target, make_draft(target, seed=6), config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=9)
    events = engine.step()
    view = request_view(engine.snapshot(), rid)
    tree = view["tree"]
    assert tree["round"] == engine.snapshot()["tick"]
    (verify,) = events_of(events, "verify")
    assert [(n["id"], n["verdict"]) for n in tree["nodes"]] == [
        (n["id"], n["verdict"]) for n in verify["nodes"]
    ]
    assert tree["nodes"][0]["verdict"] == "root"
    (commit,) = events_of(events, "commit")
    assert view["last_commit"]["tokens"] == commit["tokens"]
    assert view["last_commit"]["accepted"] == commit["accepted"]
    assert sum(n["verdict"] == "accepted" for n in tree["nodes"]) == commit["accepted"]


def test_replacement_commits_the_targets_token_at_the_first_miss() -> None:
    target = TinyModel(seed=1)
    engine = Engine(
        target,
        TinyModel(seed=99, depth=1),  # unrelated: its guesses are almost always wrong
        config=EngineConfig(draft_width=3),
        clock=ManualClock(),
    )
    rid = engine.submit([5, 6, 7], max_tokens=10)
    greedy = greedy_generate(target, [5, 6, 7], max_tokens=10).tokens
    outcomes = []
    done = 0
    for events in rounds(engine):
        for commit in events_of(events, "commit"):
            outcomes.append(commit["outcome"])
            assert commit["tokens"] == list(greedy[done : done + len(commit["tokens"])])
            if commit["outcome"] == "replacement":
                assert commit["verified"] > commit["accepted"]
                assert commit["rolled_back_positions"] == commit["verified"] - commit["accepted"]
            done += len(commit["tokens"])
    assert "replacement" in outcomes
    assert engine.result(rid).tokens == greedy


@pytest.mark.parametrize(("max_active", "max_batch_tokens"), [(1, 16), (2, 16), (4, 2)])
def test_admission_is_round_robin_without_starvation(
    max_active: int, max_batch_tokens: int
) -> None:
    target = TinyModel(seed=1)
    config = EngineConfig(max_active=max_active, max_batch_tokens=max_batch_tokens)
    engine = Engine(target, make_draft(target), config=config, clock=ManualClock())
    ids = [engine.submit([index, index + 1], max_tokens=10) for index in range(5)]
    per_round = min(max_active, max_batch_tokens)
    patience = -(-len(ids) // per_round)  # rounds until everyone had a turn
    last_commit = dict.fromkeys(ids, 0)
    for number, events in enumerate(rounds(engine), start=1):
        committed = [c["request_id"] for c in events_of(events, "commit")]
        assert len(committed) <= per_round
        for rid in committed:
            last_commit[rid] = number
        for view in engine.snapshot()["requests"]:
            if view["status"] != "finished":
                assert number - last_commit[view["id"]] < patience, (number, last_commit)
    check_all_finished(engine)


def test_a_cost_curve_prices_the_chosen_total() -> None:
    curve = ((1, 1.0), (3, 1.2), (6, 1.5), (12, 3.0))
    config = EngineConfig(max_batch_tokens=12, draft_width=5, draft_branching=2, cost_curve=curve)
    target = TinyModel(seed=3)
    engine = Engine(target, make_draft(target, seed=4), config=config, clock=ManualClock())
    for index in range(3):
        engine.submit([index, 4, 4], max_tokens=8)
    sizes = dict(curve)
    for events in rounds(engine):
        (budget,) = events_of(events, "budget")
        assert budget["cost_source"] == "synthetic cost curve"
        assert budget["graph_size"] in sizes and budget["graph_size"] >= budget["total"]
        assert budget["estimated_cost"] == sizes[budget["graph_size"]]
        # No smaller graph would hold the chosen total.
        assert all(size < budget["total"] for size in sizes if size < budget["graph_size"])
        assert budget["expected_tokens"] >= len(budget["requests"]) - 1e-9
    check_all_finished(engine)


@pytest.mark.parametrize("branching", [1, 2])
def test_draft_nodes_carry_the_drafts_own_top_tokens_and_probabilities(branching: int) -> None:
    """Every proposed node's token is among its parent's `branching` most likely draft tokens,
    and its `prob` is the draft's softmax probability of it, recomputed from scratch."""
    target = TinyModel(seed=5, vocab_size=16)
    draft = make_draft(target, noise=0.5)
    config = EngineConfig(draft_width=2, draft_branching=branching, max_draft_nodes=6)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    request = engine.submit([1, 2, 3, 4], max_tokens=12)
    checked = 0
    while not engine.idle:
        view = request_view(engine.snapshot(), request)
        prefix = [*view["prompt"], *view["generated"]]  # ends with the pending token (the root)
        for event in events_of(engine.step(), "draft"):
            nodes = event["nodes"]
            for node in nodes[1:]:
                path = []
                parent = node["parent"]
                while parent != 0:
                    path.insert(0, nodes[parent]["token"])
                    parent = nodes[parent]["parent"]
                logits = draft.full_forward(tuple(prefix + path)).logits[-1]
                probabilities = np.exp(logits - logits.max())
                probabilities /= probabilities.sum()
                assert node["prob"] == pytest.approx(probabilities[node["token"]], abs=1e-12)
                best = np.sort(probabilities)[::-1][branching - 1]
                assert probabilities[node["token"]] >= best - 1e-12
                checked += 1
    assert checked >= 6


def draft_trees(engine: Engine, request_id: str) -> list[list[tuple[int, int, float]]]:
    return [
        [(n["parent"], n["token"], n["path_prob"]) for n in event["nodes"]]
        for event in events_of(engine.trace, "draft")
        if event["request_id"] == request_id
    ]


@pytest.mark.parametrize("branching", [1, 3])
@pytest.mark.parametrize(("requests", "max_batch_tokens"), [(1, 3), (2, 6), (3, 7)])
def test_draft_trees_grow_no_more_than_the_round_can_verify(
    requests: int, max_batch_tokens: int, branching: int
) -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, depth=target.depth, noise=0.0)
    config = EngineConfig(
        max_batch_tokens=max_batch_tokens,
        draft_width=8,
        draft_branching=branching,
        max_draft_nodes=16,
    )
    engine = Engine(target, draft, config=config, clock=ManualClock())
    for index in range(requests):
        engine.submit([1 + index, 2, 3], max_tokens=12)
    drafted = 0
    while not engine.idle:
        events = engine.step()
        budgets = events_of(events, "budget")
        if not budgets:
            continue
        # Each request's fair share of the round's extra (non-main) positions.
        share = max(1, max_batch_tokens // len(budgets[0]["requests"]) - 1)
        for draft_event in events_of(events, "draft"):
            nodes = draft_event["nodes"][1:]
            if not nodes:
                continue
            drafted += 1
            assert max(n["depth"] for n in nodes) <= share
            assert len(nodes) <= 2 * share
    assert drafted > 0


@pytest.mark.parametrize("branching", [1, 2])
def test_drafts_never_reach_past_the_tokens_a_request_may_still_generate(branching: int) -> None:
    target = TinyModel(seed=5)
    draft = make_draft(target, depth=target.depth, noise=0.0)  # accepts everything it drafts
    config = EngineConfig(draft_width=6, draft_branching=branching, max_draft_nodes=12)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    ids = [engine.submit([4, 1, 3], max_tokens=4), engine.submit([2, 6], max_tokens=2)]
    depths = []
    while not engine.idle:
        remaining = {
            view["id"]: view["max_tokens"] - len(view["generated"])
            for view in engine.snapshot()["requests"]
        }
        for draft_event in events_of(engine.step(), "draft"):
            deepest = max(n["depth"] for n in draft_event["nodes"])
            # The round's bonus token counts too: only remaining - 1 drafts can be used.
            left = remaining[draft_event["request_id"]]
            assert deepest <= left - 1, (draft_event["request_id"], deepest, left)
            depths.append(deepest)
    assert depths and max(depths) >= 2
    for rid in ids:
        check_against_oracle(engine, rid)


def test_a_cost_curve_caps_the_requests_admitted_per_round_at_its_largest_size() -> None:
    config = EngineConfig(max_active=4, cost_curve=((1, 1.0), (2, 1.5)))
    engine = Engine(TinyModel(seed=1), None, config=config, clock=ManualClock())
    ids = [engine.submit([1 + index, 2], max_tokens=2) for index in range(4)]
    events = drain(engine)
    budgets = events_of(events, "budget")
    assert budgets and max(len(b["requests"]) for b in budgets) == 2
    for rid in ids:
        check_against_oracle(engine, rid)


@pytest.mark.parametrize("top", [[[5]], [[5, 6]]])
def test_expanding_a_tree_at_its_node_cap_adds_nothing(top: list[list[int]]) -> None:
    tree = DraftTree.rooted(1)
    expand(tree, [0], [[0.9] * len(top[0])], top, 1)  # one node: the cap
    assert len(tree) == 2
    assert expand(tree, [1], [[0.8] * len(top[0])], top, 1) == []
    assert len(tree) == 2


def test_a_cost_curve_tie_keeps_the_smaller_verification_total() -> None:
    # Verifying the 0.5-probable node buys 1.5 expected tokens for 1.5x the cost: no gain.
    curve = ((1, 1.0), (2, 1.5))
    budget = choose_budget([[0.5]], [[0.5]], max_batch_tokens=2, cost_curve=curve)
    assert (budget.total, budget.per_request, budget.estimated_cost) == (1, (1,), 1.0)
    better = choose_budget([[0.9]], [[0.9]], max_batch_tokens=2, cost_curve=curve)
    assert (better.total, better.per_request) == (2, (2,))


def test_a_cost_curve_point_at_exactly_max_batch_tokens_is_kept() -> None:
    config = EngineConfig(max_batch_tokens=4, cost_curve=((1, 1.0), (4, 2.0), (8, 3.0)))
    assert config.cost_curve == ((1, 1.0), (4, 2.0))
    assert EngineConfig(max_batch_tokens=4, cost_curve=((4, 2.0),)).cost_curve == ((4, 2.0),)


def test_the_expected_tokens_count_the_main_positions_plus_the_extra_nodes() -> None:
    budget = choose_budget([[0.9, 0.5, 0.2]], [[]], max_batch_tokens=3, cost_curve=None)
    assert (budget.total, budget.per_request) == (3, (3,))
    assert budget.expected_tokens == pytest.approx(1 + 0.9 + 0.5)


def test_last_rounds_confidences_stand_in_for_at_most_this_rounds_node_count() -> None:
    # Request 0 drafted one node now (0.1) after two confident ones last round; request 1 has
    # one node (0.5) and no history. Only one of request 0's old values may be used.
    budget = choose_budget([[0.1], [0.5]], [[0.9, 0.9], []], max_batch_tokens=4, cost_curve=None)
    assert budget.total == 4
    assert budget.expected_tokens == pytest.approx(2 + 0.9 + 0.5)


@pytest.mark.parametrize("branching", [1, 2])
def test_a_warm_restored_draft_proposes_what_a_cold_one_proposes(branching: int) -> None:
    def build(clock: ManualClock) -> Engine:
        config = EngineConfig(block_size=2, draft_width=4, draft_branching=branching)
        return Engine(TinyModel(seed=3), TinyModel(seed=7, depth=1), config=config, clock=clock)

    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    clock = ManualClock()
    engine = build(clock)
    engine.generate(prompt[:6], max_tokens=3)
    clock.now = 10.0  # warm: the draft replays its consumers over the cached encoder rows
    warm = engine.submit(prompt, max_tokens=6)
    drain(engine)
    assert restore_of(engine.trace, warm)["cache"] == "warm"
    cold_engine = build(ManualClock())
    cold = cold_engine.submit(prompt, max_tokens=6)
    drain(cold_engine)
    warm_trees, cold_trees = draft_trees(engine, warm), draft_trees(cold_engine, cold)
    assert len(warm_trees) == len(cold_trees) > 0
    assert max(len(tree) for tree in warm_trees) > 2  # some tree is deeper than one level
    for got, want in zip(warm_trees, cold_trees):
        assert [node[:2] for node in got] == [node[:2] for node in want]
        assert [node[2] for node in got] == pytest.approx([node[2] for node in want])


def test_no_draft_is_grown_when_no_position_is_left_to_verify_it() -> None:
    target = TinyModel(seed=7)
    for budget, requests in ((1, 1), (2, 2), (4, 4)):
        config = EngineConfig(max_batch_tokens=budget)
        engine = Engine(target, make_draft(target, seed=8), config=config, clock=ManualClock())
        for i in range(requests):
            engine.submit([1, 2, 3 + i], max_tokens=8)
        engine.run()
        metrics = engine.metrics()
        assert metrics["drafts"]["proposed"] == metrics["work"]["draft_forwards"] == 0
        check_all_finished(engine)
    # One position to spare: the budget can verify a node, so drafting goes on.
    engine = Engine(target, make_draft(target, seed=8), config=EngineConfig(max_batch_tokens=3))
    engine.submit([1, 2, 3], max_tokens=8)
    engine.submit([1, 2, 4], max_tokens=8)
    engine.run()
    assert engine.metrics()["drafts"]["verified"] > 0
