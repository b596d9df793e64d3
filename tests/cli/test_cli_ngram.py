"""`--draft ngram` on the command line: generate's tokens equal the oracle's, greedy and
sampled; an n-gram scenario file runs; bad draft settings are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import SamplingParams, TinyModel, greedy_generate, sample_generate
from tests.cli.helpers import assert_one_line_error, run, run_json

# Prompts whose tokens repeat: the lookup proposes from the first round.
PROMPTS = ("--prompt", "3,1,3,1,3", "--prompt", "5,6,5,6,5")
NGRAM = ("--draft", "ngram", "--ngram-min", "1")


def target_of(data: dict[str, Any]) -> TinyModel:
    shape = {k: data["models"]["target"][k] for k in ("vocab_size", "width", "depth", "window")}
    return TinyModel(seed=data["seed"], **shape)


def test_ngram_drafts_give_the_oracles_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "generate", *PROMPTS, "--max-tokens", "20", *NGRAM, "--check")
    assert data["check"]["passed"] and data["check"]["checked"] == 2
    assert "draft" not in data["models"]  # no draft model: the lookup runs none
    assert sum(r["proposed"] for r in data["results"]) > 0
    assert sum(r["accepted"] for r in data["results"]) > 0
    target = target_of(data)
    for result, prompt in zip(data["results"], ([3, 1, 3, 1, 3], [5, 6, 5, 6, 5])):
        assert result["tokens"] == list(greedy_generate(target, prompt, max_tokens=20).tokens)


def test_sampled_requests_with_ngram_drafts_equal_their_oracle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = ("--temperature", "0.9", "--top-p", "0.8", "--sample-seed", "21", "--check")
    data = run_json(capsys, "generate", *PROMPTS, "--max-tokens", "12", *NGRAM, *flags)
    assert data["check"]["passed"]
    oracle = sample_generate(
        target_of(data),
        [5, 6, 5, 6, 5],
        max_tokens=12,
        sampling=SamplingParams(0.9, top_p=0.8, seed=22),  # the second request's seed: 21 + 1
    )
    assert data["results"][1]["tokens"] == list(oracle.tokens)


def test_the_text_report_says_the_drafts_are_ngram(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "generate", *PROMPTS, *NGRAM, "--check")
    assert code == 0, err
    assert out.startswith("deepinfer-tui generate · speculative, n-gram drafts ·")
    assert "→ passed" in out


def test_an_ngram_scenario_file_runs_and_exports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    scenario = {
        "name": "lookup",
        "draft": {"kind": "ngram", "min_n": 1, "max_n": 2},
        "events": [
            {"tick": 0, "submit": {"prompt": [3, 1, 3, 1, 3], "max_tokens": 10}},
            {
                "tick": 1,
                "submit": {
                    "prompt": [2, 2, 2],
                    "priority": 1,
                    "sampling": {"temperature": 0.5, "seed": 3},
                },
            },
        ],
    }
    path = tmp_path / "lookup.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    data = run_json(capsys, "generate", "--scenario", str(path), "--prompt", "1,2,1,2", "--check")
    assert data["check"]["passed"]
    code, out, err = run(
        capsys, "export", "--scenario", str(path), "--format", "json", "--out", str(tmp_path)
    )
    assert code == 0, err
    (trace,) = tmp_path.glob("lookup-*.trace.json")
    code, out, err = run(capsys, "replay", str(trace), "--check")
    assert code == 0, err + out
    assert "reproduced" in out


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--draft", "ngram", "--ngram-min", "0"), "--ngram-min: expected a positive whole"),
        (("--draft", "ngram", "--ngram-max", "x"), "--ngram-max: expected a whole number"),
        (("--draft", "beam"), "--draft: invalid choice: 'beam'"),
        (("--ngram-min", "2"), "--ngram-min and --ngram-max size an n-gram draft"),
        (("--greedy", "--ngram-max", "2"), "add --draft ngram"),
        (("--draft", "ngram", "--greedy"), "not allowed with argument"),
        (
            ("--draft", "ngram", "--ngram-min", "4", "--ngram-max", "3"),
            "draft: max_n (3) must be at least min_n (4)",
        ),
    ],
)
def test_bad_draft_flags_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], fragment: str
) -> None:
    code, out, err = run(capsys, "generate", *PROMPTS, *flags)
    assert_one_line_error(code, out, err, fragment)


def test_a_bad_ngram_scenario_is_one_line_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"draft": {"kind": "ngram", "min_n": 0}}), encoding="utf-8")
    code, out, err = run(capsys, "generate", "--scenario", str(path), "--prompt", "1,2")
    assert_one_line_error(code, out, err, "bad.json: draft: min_n must be a positive integer")
