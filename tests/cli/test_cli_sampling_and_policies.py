"""generate's sampling flags and the schedule / cache settings (issues 22, 23, 24)."""

from __future__ import annotations

import pytest

from engine import SamplingParams, TinyModel, sample_generate
from tests.cli.helpers import assert_one_line_error, run, run_json

PROMPTS = ("--prompt", "1,2,3", "--prompt", "4,5,6,7")


def test_sampled_generate_equals_its_oracle_with_drafts_or_without(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = ("--temperature", "0.8", "--top-k", "6", "--sample-seed", "11", "--check")
    speculative = run_json(capsys, "generate", *PROMPTS, *flags, "--json")
    greedy = run_json(capsys, "generate", *PROMPTS, *flags, "--greedy", "--json")
    assert speculative["check"]["passed"] and greedy["check"]["passed"]
    tokens = [r["tokens"] for r in speculative["results"]]
    assert tokens == [r["tokens"] for r in greedy["results"]]  # drafts change no token
    model = TinyModel(seed=speculative["seed"], **{k: speculative["models"]["target"][k] for k in (
        "vocab_size", "width", "depth", "window")})  # fmt: skip
    oracle = sample_generate(
        model, [1, 2, 3], max_tokens=8, sampling=SamplingParams(0.8, top_k=6, seed=11)
    )
    assert tokens[0] == list(oracle.tokens)  # the first request's seed is --sample-seed


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--temperature", "-1"), "temperature must be a finite number >= 0"),
        (("--top-p", "1.5"), "top_p"),
        (("--token-budget", "0"), "--token-budget: expected a positive whole number"),
        (("--schedule-policy", "sjf"), "--schedule-policy: invalid choice"),
        (("--cache-policy", "lru"), "--cache-policy: invalid choice"),
    ],
)
def test_bad_sampling_and_policy_flags_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], fragment: str
) -> None:
    code, out, err = run(capsys, "generate", *PROMPTS, *flags)
    assert_one_line_error(code, out, err, fragment)


@pytest.mark.parametrize("policy", ["ttl", "blocks", "radix"])
def test_every_cache_policy_and_a_small_budget_pass_the_oracle_check(
    capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    data = run_json(
        capsys, "generate", *PROMPTS, "--prompt", "1,2,3,9", "--cache-policy", policy,
        "--token-budget", "2", "--schedule-policy", "lpm", "--block-size", "2", "--check",
        "--json",
    )  # fmt: skip
    assert data["check"]["passed"]
    assert data["config"]["cache_policy"] == policy and data["config"]["token_budget"] == 2
