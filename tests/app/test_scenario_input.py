"""Scenario documents that break a rule: refused at load, with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from deepinfer_tui.scenario import ScenarioError, parse_scenario
from deepinfer_tui.session import Session
from engine import check_request_id


def _problem(data: dict[str, Any], source: str = "s.json") -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, source)
    return str(caught.value)


@pytest.mark.parametrize(
    "name",
    [
        "a/b\n../c\u202e",  # a newline, then a right-to-left override
        "tab\there",
        "zero\u200bwidth",
        "bidi\u202eevil",
        "line\u2028separator",
        "escape\x1b[2J",
    ],
)
def test_a_name_that_would_garble_a_line_is_refused(name: str) -> None:
    problem = _problem({"name": name})
    assert problem.startswith("s.json: name: ")
    assert "characters are not allowed" in problem
    assert "\n" not in problem and "\u202e" not in problem  # shown escaped, never raw


@pytest.mark.parametrize(
    "char", ["\x00", "\x7f", "\u00ad", "\u200d", "\ufeff", "\u2029", "é", "中"]
)
def test_the_name_follows_the_request_ids_character_rule(char: str) -> None:
    try:
        check_request_id(f"a{char}b")
        allowed = True
    except ValueError:
        allowed = False
    if allowed:
        assert parse_scenario({"name": f"a{char}b"}).name == f"a{char}b"
    else:
        assert _problem({"name": f"a{char}b"}).startswith("s.json: name: ")


def test_a_long_name_is_refused_with_its_length_and_never_echoed_whole() -> None:
    assert parse_scenario({"name": "n" * 200}).name == "n" * 200
    problem = _problem({"name": "n" * 10_000})
    assert "name: " in problem and "10000 characters; at most 200" in problem
    assert len(problem) < 200


@pytest.mark.parametrize("name", ["", "   ", 5, None, ["a"]])
def test_a_name_must_be_a_non_empty_string(name: object) -> None:
    assert "name: must be a non-empty string" in _problem({"name": name})


def test_a_file_name_with_a_newline_cannot_be_the_name() -> None:
    problem = _problem({}, "dir/bad\nname.json")
    assert "name: taken from the file's name" in problem and "U+000A" in problem


def test_a_long_file_name_is_cut_to_the_longest_name() -> None:
    assert parse_scenario({}, "x" * 230 + ".json").name == "x" * 200


@pytest.mark.parametrize("description", [{"a": 1}, 3, ["x"], {}, [], 0, False])
def test_the_description_must_be_a_string(description: object) -> None:
    problem = _problem({"description": description})
    assert problem.startswith("s.json: description: must be a string, got ")


def test_a_null_description_is_none() -> None:
    assert parse_scenario({"description": None}).description == ""


@pytest.mark.parametrize("wait", [{"idle": True}, {"tick": 4}, {"tick": 4, "submit": None}])
def test_an_event_with_no_action_is_a_wait_for_the_events_after_it(wait: dict[str, Any]) -> None:
    first = {"tick": 0, "submit": {"id": "a", "prompt": [1, 2, 3], "max_tokens": 6}}
    later = {"tick": 0, "submit": {"id": "b", "prompt": [4, 5], "max_tokens": 2}}
    # Greedy decoding: a commits one token per round, so it is done after 6 rounds.
    session = Session(parse_scenario({"draft": None, "events": [first, wait, later]}))
    submitted_at = None
    while not session.finished:
        ids = {r["id"] for r in session.snapshot()["requests"]}
        if "b" in ids and submitted_at is None:
            submitted_at = session.engine.tick
        session.step()
    assert submitted_at == (4 if "tick" in wait else 6)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"model": {"width": 0}}, "model: width must be"),
        ({"draft": {"depth": 9}}, "draft: draft depth 9"),
        ({"draft": {"noise": -1}}, "draft: "),
        ({"config": {"block_size": 0}}, "config: block_size must be"),
        ({"config": {"colour": 1}}, "config: unknown config field(s)"),
    ],
)
def test_a_bad_setting_names_its_section(data: dict[str, Any], where: str) -> None:
    assert _problem(data).startswith(f"s.json: {where}")


@pytest.mark.parametrize(
    "data",
    [
        {"model": {"width": "w" * 10_000}},
        {"config": {"recovery_mode": "r" * 10_000}},
        {"events": [{"tick": 0, "cancel": "c" * 10_000}]},
        {"seed": "s" * 10_000},
        {"x" * 1000 + str(i): 1 for i in range(20)},
    ],
)
def test_an_error_never_quotes_a_huge_value_whole(data: dict[str, Any]) -> None:
    assert len(_problem(data)) < 400
