"""Admission cost per cache policy with 10,000 cached blocks:
`python benchmarks/cache_admission.py [--blocks 10000] [--prompt 100] [--shared 0]
[--repeat 20]`.

Each policy's engine first caches `--blocks` blocks (prompts of `--prompt` random tokens,
block size 1, so a prompt caches that many blocks; `--shared` of them the same in every
prompt, like a system prompt), then a new prompt extending one of them is
looked up `--repeat` times: the lookup alone (`ttl` scans its entries for the longest common
prefix, `blocks` hashes the prompt's full blocks, `radix` walks the tree) and the whole first
round of a request (restore, then one row computed). Medians are printed; on a shared machine
they are indicative only. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from engine import Engine, EngineConfig, TinyModel

POLICIES = ("ttl", "blocks", "radix")


def filled_engine(
    policy: str, blocks: int, prompt: int, shared: int, seed: int = 0
) -> tuple[Engine, list]:
    """An engine whose cache holds `blocks` blocks of `blocks // prompt` random prompts (the
    first `shared` tokens the same in all)."""
    count = blocks // prompt
    config = EngineConfig(
        cache_policy=policy,
        block_size=1,
        num_blocks=blocks + 4 * prompt,  # room for the cached blocks and the measured rounds
        cache_capacity=count + 8,
        state_ttl=1e9,
        prefix_ttl=1e9,
        undo_depth=0,
        max_active=8,
    )
    engine = Engine(TinyModel(seed=7), config=config, clock=lambda: 0.0)
    rng = np.random.default_rng(seed)
    vocab = engine.target.vocab_size
    common = rng.integers(0, vocab, size=shared).tolist()
    prompts = [
        common + rng.integers(0, vocab, size=prompt + 1 - shared).tolist() for _ in range(count)
    ]
    for tokens in prompts:
        engine.submit(tokens, max_tokens=1)
    engine.run()
    return engine, prompts


def measure(policy: str, blocks: int, prompt: int, shared: int, repeat: int) -> dict[str, float]:
    engine, prompts = filled_engine(policy, blocks, prompt, shared)
    wanted = (*prompts[len(prompts) // 2][:prompt], 1)
    lookups, rounds, reused = [], [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        engine.prefixes.lookup(wanted, 0.0)
        lookups.append(time.perf_counter() - start)
        request_id = engine.submit([*wanted, 2], max_tokens=1)
        start = time.perf_counter()
        events = engine.step()
        rounds.append(time.perf_counter() - start)
        (restore,) = [e for e in events if e["kind"] == "restore"]
        reused = restore["reused_positions"]
        engine.run()
        assert engine.result(request_id).finish_reason == "length"
    return {
        "lookup_us": statistics.median(lookups) * 1e6,
        "first_round_ms": statistics.median(rounds) * 1e3,
        "reused": reused,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--prompt", type=int, default=100)
    parser.add_argument("--shared", type=int, default=0, help="leading tokens all prompts share")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(
        f"{args.blocks} cached blocks ({args.prompt}-token prompts sharing their first "
        f"{args.shared}, block size 1)"
    )
    print(f"{'policy':8} {'lookup':>12} {'first round':>14} {'reused':>7}")
    for policy in POLICIES:
        figures = measure(policy, args.blocks, args.prompt, args.shared, args.repeat)
        print(
            f"{policy:8} {figures['lookup_us']:>9.1f} us {figures['first_round_ms']:>11.2f} ms "
            f"{figures['reused']:>7}"
        )


if __name__ == "__main__":
    main()
