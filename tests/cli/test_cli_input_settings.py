"""`generate --input`: a request's own priority and sampling, checked like the flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import SamplingParams, TinyModel, sample_generate
from tests.cli.helpers import assert_one_line_error, run, run_json


def requests_file(tmp_path: Path, requests: list[dict]) -> str:
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(requests))
    return str(path)


def test_a_requests_own_sampling_and_priority_are_used_and_pass_the_oracle(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = requests_file(
        tmp_path,
        [
            {"prompt": [1, 2, 3], "sampling": {"temperature": 0.8, "top_k": 6, "seed": 11}},
            {"prompt": [4, 5], "priority": -1},  # greedy: the flags give no sampling
        ],
    )
    data = run_json(
        capsys, "generate", "--input", path, "--schedule-policy", "priority", "--check", "--json"
    )
    assert data["check"]["passed"]
    sampled, greedy = data["results"]
    model = TinyModel(seed=data["seed"], **{k: data["models"]["target"][k] for k in (
        "vocab_size", "width", "depth", "window")})  # fmt: skip
    oracle = sample_generate(
        model, [1, 2, 3], max_tokens=8, sampling=SamplingParams(0.8, top_k=6, seed=11)
    )
    assert sampled["tokens"] == list(oracle.tokens)
    events = run_json(capsys, "generate", "--input", path, "--json", "--trace")["events"]
    queued = {e["request_id"]: e for e in events if e["kind"] == "queued"}
    assert queued[greedy["id"]].get("priority") == -1
    assert queued[sampled["id"]]["sampling"]["seed"] == 11


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        ({"prompt": [1], "sampling": {"temperature": -1}}, "request 1: sampling: temperature"),
        ({"prompt": [1], "sampling": {"bogus": 1}}, "request 1: sampling: unknown"),
        ({"prompt": [1], "sampling": 3}, "request 1: sampling: expected an object"),
        ({"prompt": [1], "priority": "high"}, "request 1: priority must be a whole number"),
    ],
)
def test_bad_settings_in_a_requests_file_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request_: dict, fragment: str
) -> None:
    code, out, err = run(capsys, "generate", "--input", requests_file(tmp_path, [request_]))
    assert_one_line_error(code, out, err, fragment)
