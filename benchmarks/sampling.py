"""Sampling benchmark (issue #23): the `batch` shape greedy and at temperature 0.8, and the
acceptance of each draft check and drafter on the same workload. Not part of the test suite.

    python benchmarks/sampling.py [--repeat 3] [--quick]

Figures are medians over the repeats of tokens per CPU second of this process (the cases take
turns); on a shared machine they are indicative only.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import numpy as np

from engine import Engine, EngineConfig, NgramDrafter, SamplingParams, TinyModel, make_draft

REQUESTS, PROMPT_TOKENS = 16, 64


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, length).tolist() for _ in range(count)]


def repetitive_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """Prompts made of a few repeated phrases: what prompt lookup is for."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        phrases = [rng.integers(0, vocab, 8).tolist() for _ in range(3)]
        out.append([t for _ in range(length // 8) for t in phrases[rng.integers(0, 3)]])
    return out


def run(
    draft: str, acceptance: str, temperature: float, new_tokens: int, workload: list[list[int]]
) -> dict[str, Any]:
    target = TinyModel(vocab_size=64, width=32, depth=3, window=8, seed=7)
    drafter = {"none": None, "early-exit": make_draft(target, seed=8), "ngram": NgramDrafter()}
    config = EngineConfig(
        max_active=REQUESTS, max_batch_tokens=64, draft_acceptance=acceptance, num_blocks=1024
    )
    engine = Engine(target, drafter[draft], config=config)
    for index, prompt in enumerate(workload):
        sampling = SamplingParams(temperature, seed=index) if temperature else SamplingParams()
        engine.submit(prompt, max_tokens=new_tokens, sampling=sampling)
    gc.collect()
    start = time.process_time()  # CPU time: less moved than wall time by a busy machine
    results = engine.run()
    seconds = time.process_time() - start
    tokens = sum(len(r.tokens) for r in results)
    drafts = engine.metrics()["drafts"]
    verified = drafts["verified"]
    return {
        "tokens/s": tokens / seconds,
        "rounds": engine.tick,
        "acceptance": drafts["accepted"] / verified if verified else 0.0,
        "tokens/round": tokens / engine.tick,
    }


CASES = [  # (label, draft, acceptance, temperature, workload)
    ("batch greedy", "early-exit", "coupled", 0.0, "random"),
    ("batch T0.8 coupled", "early-exit", "coupled", 0.8, "random"),
    ("batch T0.8 rejection", "early-exit", "rejection", 0.8, "random"),
    ("no draft greedy", "none", "coupled", 0.0, "random"),
    ("no draft T0.8", "none", "coupled", 0.8, "random"),
    ("repetitive greedy early-exit", "early-exit", "coupled", 0.0, "repetitive"),
    ("repetitive greedy ngram", "ngram", "coupled", 0.0, "repetitive"),
    ("repetitive T0.8 coupled early-exit", "early-exit", "coupled", 0.8, "repetitive"),
    ("repetitive T0.8 coupled ngram", "ngram", "coupled", 0.8, "repetitive"),
    ("repetitive T0.8 rejection ngram", "ngram", "rejection", 0.8, "repetitive"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="16 new tokens instead of 64")
    args = parser.parse_args()
    new_tokens = 16 if args.quick else 64
    workloads = {
        "random": prompts(REQUESTS, PROMPT_TOKENS, 64),
        "repetitive": repetitive_prompts(REQUESTS, PROMPT_TOKENS, 64),
    }
    # Cases take turns within each repeat, so a busy spell of the machine falls on all of them.
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in CASES}
    for _ in range(args.repeat):
        for label, draft, acceptance, temperature, workload in CASES:
            runs[label].append(run(draft, acceptance, temperature, new_tokens, workloads[workload]))
    print(f"{'case':36} {'tokens/cpu-s':>12} {'rounds':>7} {'accept':>7} {'tok/round':>9}")
    for label, *_ in CASES:
        median = {key: statistics.median(r[key] for r in runs[label]) for key in runs[label][0]}
        print(
            f"{label:36} {median['tokens/s']:12.0f} {median['rounds']:7.0f} "
            f"{median['acceptance']:7.2f} {median['tokens/round']:9.2f}"
        )


if __name__ == "__main__":
    main()
