"""Scenarios whose draft is the n-gram drafter: loading, refusals naming the field, the
command line's draft settings, exactness against the oracle and exact replay of a trace."""

from __future__ import annotations

from typing import Any

import pytest

from deepinfer_tui.cli.common import oracle_check
from deepinfer_tui.replay import Replay
from deepinfer_tui.scenario import ScenarioError, default_scenario, parse_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.tracefile import parse_trace, trace_data
from engine import NgramDrafter

# A prompt whose tokens repeat (3 1 3 1 3): n-gram lookup finds a match from the first round,
# and with this seed the model's own output repeats enough for some drafts to be accepted.
REPEATING = [3, 1, 3, 1, 3]


def ngram_scenario(draft: Any = None) -> dict[str, Any]:
    data = default_scenario().to_dict()
    data["name"] = "ngram"
    data["draft"] = {"kind": "ngram", "min_n": 1, "max_n": 3} if draft is None else draft
    data["events"] = [
        {"tick": 0, "submit": {"prompt": REPEATING, "max_tokens": 20}},
        {"tick": 0, "submit": {"prompt": [5, 6, 5, 6, 5], "max_tokens": 12}},
        {
            "tick": 2,
            "submit": {
                "prompt": [9, 9, 9, 9],
                "max_tokens": 10,
                "sampling": {"temperature": 0.9, "top_k": 6, "seed": 4},
            },
        },
        {"tick": 4, "cancel": "request-2"},
    ]
    return data


def problem(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(data, "n.json")
    return str(refused.value)


def test_an_ngram_draft_loads_and_survives_a_round_trip() -> None:
    scenario = parse_scenario(ngram_scenario(), "n.json")
    assert scenario.draft == {"kind": "ngram", "min_n": 1, "max_n": 3}
    _, draft = scenario.build_models()
    assert isinstance(draft, NgramDrafter) and (draft.min_n, draft.max_n) == (1, 3)
    assert parse_scenario(scenario.to_dict(), "again").draft == scenario.draft


def test_an_ngram_scenario_drafts_by_lookup_and_matches_the_oracle() -> None:
    session = Session(parse_scenario(ngram_scenario(), "n.json"))
    session.run()
    drafts = [e for e in session.log() if e["kind"] == "draft"]
    assert drafts  # the repeating prompt is found at once
    assert session.engine.metrics()["drafts"]["accepted"] > 0
    assert "draft" not in session.snapshot()["models"]  # no draft model runs
    check = oracle_check(session)
    assert check["passed"] and check["checked"] == 2  # request-2 was cancelled


def test_an_ngram_session_replays_exactly() -> None:
    recorded = Session(parse_scenario(ngram_scenario(), "n.json"))
    for _ in range(3):
        recorded.step()
    recorded.rollback("request-1", 2)
    recorded.submit([4, 2, 4, 2], 6, priority=1, sampling={"temperature": 0.7, "seed": 11})
    recorded.step()
    recorded.undo()
    recorded.run()
    trace = parse_trace(trace_data(recorded), "ngram.trace.json")
    assert trace.scenario.draft == {"kind": "ngram", "min_n": 1, "max_n": 3}
    replay = Replay(trace, frames=False)
    assert replay.reproduced, replay.divergence
    ids = recorded.engine.request_ids()
    assert [replay.session.engine.result(i).tokens for i in ids] == [
        recorded.engine.result(i).tokens for i in ids
    ]


def test_a_model_draft_may_say_its_kind() -> None:
    data = ngram_scenario({"kind": "model", "depth": 2, "noise": 0.0})
    session = Session(parse_scenario(data, "m.json"))
    assert session.snapshot()["models"]["draft"]["depth"] == 2


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        ({"kind": "beam"}, 'n.json: draft.kind: must be "model" or "ngram", got \'beam\''),
        ({"kind": 3}, 'n.json: draft.kind: must be "model" or "ngram", got 3'),
        ({"kind": "ngram", "min_n": 0}, "n.json: draft: min_n must be a positive integer, got 0"),
        ({"kind": "ngram", "max_n": 1.5}, "n.json: draft: max_n must be a positive integer"),
        (
            {"kind": "ngram", "min_n": 4, "max_n": 3},
            "n.json: draft: max_n (3) must be at least min_n (4)",
        ),
        (
            {"kind": "ngram", "depth": 1},
            "n.json: draft: unknown field(s) depth for a draft of kind ngram (max_n, min_n)",
        ),
        (
            {"min_n": 2},
            "n.json: draft: unknown field(s) min_n for a draft of kind model (depth, noise, seed)",
        ),
        ("ngram", "n.json: draft: must be null, an object with depth, noise and/or seed, or"),
    ],
)
def test_a_bad_draft_is_refused_naming_the_field(draft: Any, message: str) -> None:
    assert problem(ngram_scenario(draft)).startswith(message)


def test_the_command_line_draft_settings_override_the_scenario() -> None:
    base = default_scenario()
    ngram = base.with_overrides(draft="ngram")
    assert ngram.draft == {"kind": "ngram"}
    assert base.with_overrides(draft="ngram", ngram_min=1, ngram_max=4).draft == {
        "kind": "ngram",
        "min_n": 1,
        "max_n": 4,
    }
    # A larger minimum alone raises the default maximum (3) with it.
    assert base.with_overrides(draft="ngram", ngram_min=5).draft == {
        "kind": "ngram",
        "min_n": 5,
        "max_n": 5,
    }
    assert ngram.with_overrides(draft="model").draft == {"depth": 1, "noise": 0.1}
    assert base.with_overrides(draft="model").draft == base.draft  # the scenario's own model
    assert ngram.with_overrides(greedy=True).draft is None
    # An n-gram scenario's sizes can be changed without saying --draft again.
    from_file = parse_scenario(ngram_scenario(), "n.json")
    assert from_file.with_overrides(ngram_max=2).draft == {"kind": "ngram", "min_n": 1, "max_n": 2}


def test_ngram_sizes_without_an_ngram_draft_are_refused() -> None:
    with pytest.raises(ValueError, match="add --draft ngram"):
        default_scenario().with_overrides(ngram_min=2)
    with pytest.raises(ScenarioError, match="max_n \\(2\\) must be at least min_n \\(3\\)"):
        default_scenario().with_overrides(draft="ngram", ngram_min=3, ngram_max=2)


def test_the_session_snapshot_says_who_drafts() -> None:
    """The engine's `models` has no draft for n-gram drafting or for none: the session's
    part of the snapshot tells them apart."""
    ngram = Session(parse_scenario(ngram_scenario(), "n.json")).snapshot()
    assert ngram["session"]["draft"] == {"kind": "ngram", "min_n": 1, "max_n": 3}
    assert "draft" not in ngram["models"]
    assert (
        Session(default_scenario().with_overrides(greedy=True)).snapshot()["session"]["draft"]
        is None
    )
    assert Session(default_scenario()).snapshot()["session"]["draft"] == {
        "depth": 1,
        "noise": 0.1,
        "seed": 8,
    }
