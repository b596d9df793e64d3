"""Prefix cache: hot / warm / cold restores, longest-prefix reuse, TTLs, identity keying."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from tests.engine.helpers import (
    ManualClock,
    check_against_oracle,
    check_block_invariants,
    drain,
    events_of,
    restore_of,
)

PROMPT = [5, 3, 1, 4, 1, 5, 9, 2]
DEPTH = 3  # TinyModel's default depth: consumer rows are counted per layer


def first_round(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[str, dict, dict]:
    """Submit alone, run one round; returns (id, restore event, work-counter deltas)."""
    before = engine.metrics()["work"]
    rid = engine.submit(prompt, max_tokens=max_tokens)
    events = engine.step()
    after = engine.metrics()["work"]
    delta = {key: after[key] - before[key] for key in before}
    drain(engine)
    check_against_oracle(engine, rid)
    return rid, restore_of(events, rid), delta


def test_cold_hot_warm_cold_restores_say_what_and_why() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=4), clock=clock)
    n = len(PROMPT)

    _, cold, work = first_round(engine, PROMPT, 4)
    assert cold["cache"] == "cold"
    assert (cold["reused_positions"], cold["suffix_positions"]) == (0, n)
    assert (cold["encoder_rows"], cold["consumer_rows"]) == (n, n * DEPTH)
    assert (work["encoder_rows"], work["consumer_rows"]) == (n, n * DEPTH)
    assert "no live cached prefix" in cold["reason"]

    clock.now = 1.0  # the first request published at 0s; hot until 3s
    _, hot, work = first_round(engine, PROMPT, 2)
    assert hot["cache"] == "hot"
    # The last prompt token is always recomputed: it yields the first new token's logits.
    assert (hot["reused_positions"], hot["suffix_positions"]) == (n - 1, 1)
    assert (hot["encoder_rows"], hot["consumer_rows"]) == (1, DEPTH)
    assert (work["encoder_rows"], work["consumer_rows"]) == (1, DEPTH)
    assert "hot" in hot["reason"] and "3s" in hot["reason"]

    clock.now = 10.0  # every hot cursor expired (latest at 4s); encoder prefixes live on
    _, warm, work = first_round(engine, PROMPT, 2)
    assert warm["cache"] == "warm"
    assert (warm["reused_positions"], warm["suffix_positions"]) == (n - 1, 1)
    # Warm keeps only the encoder side: one encoder row, but every consumer is replayed.
    assert (warm["encoder_rows"], warm["consumer_rows"]) == (1, n * DEPTH)
    assert (work["encoder_rows"], work["consumer_rows"]) == (1, n * DEPTH)
    # The reason names when the hot cursor expired (past) and until when the prefix lives.
    assert "expired" in warm["reason"]
    times = [float(t) for t in re.findall(r"([0-9.]+)s\b", warm["reason"])]
    assert any(3.0 <= t <= 10.0 for t in times) and any(t > 10.0 for t in times), warm

    clock.now = 1000.0  # every encoder prefix expired too
    _, cold_again, work = first_round(engine, PROMPT, 2)
    assert cold_again["cache"] == "cold"
    assert (cold_again["encoder_rows"], work["encoder_rows"]) == (n, n)

    assert engine.metrics()["cache"] == {"hot": 1, "warm": 1, "cold": 2}


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_longest_prefix_reuse_computes_only_the_suffix(block_size: int) -> None:
    clock = ManualClock()
    engine = Engine(
        TinyModel(seed=4), None, config=EngineConfig(block_size=block_size), clock=clock
    )
    engine.generate([1, 2, 7, 7], max_tokens=2)  # shares 2 positions with the probe
    engine.generate(PROMPT[:6], max_tokens=2)  # shares 6: the longest
    engine.generate([5, 3, 1, 8], max_tokens=2)  # shares 3
    probe = [*PROMPT[:6], 20, 21, 22]
    _, restore, work = first_round(engine, probe, 3)
    assert restore["cache"] == "hot"
    assert (restore["reused_positions"], restore["suffix_positions"]) == (6, 3)
    assert (work["encoder_rows"], work["consumer_rows"]) == (3, 3 * DEPTH)


def test_a_shorter_cached_prefix_is_extended_by_the_new_suffix() -> None:
    engine = Engine(TinyModel(seed=4), None, clock=ManualClock())
    first = engine.generate([1, 2, 3], max_tokens=2)
    # The cache holds the prompt plus the tokens whose rows were computed: [1, 2, 3, g1].
    longer = [1, 2, 3, first.tokens[0], 9, 9, 9, 9]
    _, restore, work = first_round(engine, longer, 2)
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 4)
    assert work["encoder_rows"] == 4


def test_restore_with_a_draft_still_counts_only_the_suffix() -> None:
    target = TinyModel(seed=6)
    engine = Engine(target, make_draft(target, seed=1), clock=ManualClock())
    engine.generate(PROMPT, max_tokens=3)
    rid = engine.submit([*PROMPT, 11, 12], max_tokens=4)
    restore = restore_of(drain(engine), rid)
    assert restore["cache"] == "hot" and restore["suffix_positions"] == 2
    assert restore["encoder_rows"] == 2
    check_against_oracle(engine, rid)


def test_cancelled_before_admission_does_no_model_work() -> None:
    target = TinyModel(seed=1)
    engine = Engine(target, make_draft(target), clock=ManualClock())
    engine.generate([1, 2, 3], max_tokens=3)
    work = engine.metrics()["work"]
    doomed = engine.submit([1, 2, 3, 4, 5, 6], max_tokens=8)
    assert engine.cancel(doomed) is True
    events = engine.step()
    assert engine.metrics()["work"] == work
    assert not [e for e in events if e["request_id"] == doomed]
    assert not [e for e in engine.trace if e["request_id"] == doomed and e["kind"] == "restore"]
    result = engine.result(doomed)
    assert (result.finish_reason, result.tokens) == ("cancelled", ())
    assert engine.metrics()["cache"] == {"hot": 0, "warm": 0, "cold": 1}


def test_cancelled_while_others_run_is_never_admitted() -> None:
    target = TinyModel(seed=1)
    engine = Engine(target, make_draft(target), config=EngineConfig(max_active=1))
    busy = engine.submit([4, 4], max_tokens=3)
    doomed = engine.submit([1, 2, 3], max_tokens=3)
    engine.step()  # only `busy` was admitted
    engine.cancel(doomed)
    drain(engine)
    assert not [e for e in engine.trace if e["request_id"] == doomed and e["kind"] == "restore"]
    check_against_oracle(engine, busy)


@pytest.mark.parametrize("change", ["target", "draft"])
def test_changed_weights_never_reuse_cached_state(change: str) -> None:
    target = TinyModel(seed=3)
    draft = make_draft(target, seed=4)
    engine = Engine(target, draft, clock=ManualClock())
    engine.generate(PROMPT, max_tokens=4)
    model = target if change == "target" else draft
    identity = model.identity
    model.weights = dataclasses.replace(model.weights, head=model.weights.head * 1.5)
    assert model.identity != identity
    rid = engine.submit(PROMPT, max_tokens=4)
    events = drain(engine)
    assert restore_of(events, rid)["cache"] == "cold"
    check_against_oracle(engine, rid)  # the oracle runs the changed target
    # Unchanged weights keep the identity stable, so the cache works again.
    again = engine.submit(PROMPT, max_tokens=2)
    assert restore_of(drain(engine), again)["cache"] == "hot"


def test_identity_is_stable_for_equal_weights() -> None:
    assert TinyModel(seed=3).identity == TinyModel(seed=3).identity
    assert TinyModel(seed=3).identity != TinyModel(seed=4).identity
    assert TinyModel(seed=3).identity != TinyModel(seed=3, window=2).identity


def test_hot_and_warm_boundaries_follow_the_ttls() -> None:
    clock = ManualClock()
    config = EngineConfig(state_ttl=2.0, prefix_ttl=5.0)
    engine = Engine(TinyModel(seed=2), None, config=config, clock=clock)
    clock.now = 10.0
    publish_events = events_of(drain_after(engine, PROMPT, 2), "publish")
    assert publish_events
    for publish in publish_events:
        assert (publish["hot_until"], publish["warm_until"]) == (12.0, 15.0)
    states = []
    for now in (11.999, 12.0, 14.999):
        clock.now = now
        states.append({entry["state"] for entry in engine.snapshot()["cache"]})
    assert states == [{"hot"}, {"warm"}, {"warm"}]
    clock.now = 14.999
    rid = engine.submit(PROMPT, max_tokens=1)
    assert restore_of(drain(engine), rid)["cache"] == "warm"
    clock.now = 15.0  # the first entries' warm_until: the next step drops exactly those
    engine.step()
    remaining = engine.snapshot()["cache"]
    assert remaining and all(entry["warm_until"] == 14.999 + 5.0 for entry in remaining)


def drain_after(engine: Engine, prompt: list[int], max_tokens: int) -> list[dict[str, Any]]:
    engine.submit(prompt, max_tokens=max_tokens)
    return drain(engine)


@pytest.mark.parametrize("undo_depth", [0, 64])
def test_expired_entries_release_their_blocks_by_the_next_step(undo_depth: int) -> None:
    clock = ManualClock()
    config = EngineConfig(block_size=2, undo_depth=undo_depth)
    engine = Engine(TinyModel(seed=2), None, config=config, clock=clock)
    engine.generate(PROMPT, max_tokens=3)
    engine.generate([7, 7, 7], max_tokens=2)
    snapshot = check_block_invariants(engine)
    assert snapshot["cache"] and snapshot["metrics"]["blocks"]["cached"] > 0
    cached_blocks = {b for entry in snapshot["cache"] for b in entry["blocks"]}
    clock.now = 100.0  # prefix_ttl: every entry has expired
    events = engine.step()
    assert {tuple(e["blocks"]) for e in events_of(events, "evict")}
    snapshot = check_block_invariants(engine)
    assert snapshot["cache"] == []
    blocks = snapshot["metrics"]["blocks"]
    assert blocks["cached"] == 0
    for block in snapshot["pool"]["blocks"]:
        if block["id"] in cached_blocks:
            assert block["refcount"] == 0 and block["state"] != "cached"
    if undo_depth == 0:  # no history may still need their rows: they are free now
        assert blocks["free"] == blocks["total"]


def test_cache_capacity_evicts_the_least_recently_used_entry() -> None:
    clock = ManualClock()
    config = EngineConfig(cache_capacity=2, block_size=4)
    engine = Engine(TinyModel(seed=8), None, config=config, clock=clock)
    engine.generate([1, 1, 1, 1], max_tokens=1)
    engine.generate([2, 2, 2, 2], max_tokens=1)
    touched = engine.submit([1, 1, 1, 1, 3], max_tokens=1)  # uses (refreshes) the [1, ...] entry
    drain(engine)
    assert engine.result(touched).finish_reason == "length"
    events = drain_after(engine, [6, 6, 6, 6], 1)
    evicted = events_of(events, "evict")
    assert evicted and all(e["reason"] == "cache full" for e in evicted)
    snapshot = check_block_invariants(engine)
    assert len(snapshot["cache"]) <= 2
    assert not any(entry["tokens"][:4] == [2, 2, 2, 2] for entry in snapshot["cache"])
    assert engine.metrics()["requests"]["evictions"] >= len(evicted)


def test_identical_prompts_share_blocks_and_outputs() -> None:
    target = TinyModel(seed=5)
    engine = Engine(target, None, config=EngineConfig(block_size=2), clock=ManualClock())
    engine.generate(PROMPT, max_tokens=2)
    first = engine.submit(PROMPT, max_tokens=4)
    second = engine.submit(PROMPT, max_tokens=4)
    engine.step()
    snapshot = check_block_invariants(engine)
    tables = [
        [b["id"] for b in view["blocks"]]
        for view in snapshot["requests"]
        if view["id"] in (first, second)
    ]
    shared = set(tables[0]) & set(tables[1])
    assert shared and snapshot["metrics"]["blocks"]["shared"] >= len(shared)
    drain(engine)
    oracle = greedy_generate(target, PROMPT, max_tokens=4).tokens
    assert engine.result(first).tokens == engine.result(second).tokens == oracle
