"""Prefix cache: hot / warm / cold restores, longest-prefix reuse, TTLs, identity keying."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft
from engine.cache import PrefixCache
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


TTLS = (1.0, 5.0)  # hot for 1 s, warm for 5 s


def cache_states(engine: Engine) -> list[str]:
    return [entry["state"] for entry in engine.snapshot()["cache"]]


def test_refreshing_an_entry_makes_it_the_most_recently_used() -> None:
    cache = PrefixCache(capacity=2)
    cache.publish("k", (1, 1), [0], now=0.0, ttls=TTLS)
    cache.publish("k", (2, 2), [1], now=0.0, ttls=TTLS)
    assert cache.publish("k", (1, 1), [0], now=0.5, ttls=TTLS) == (None, None)  # a refresh
    entry, evicted = cache.publish("k", (3, 3), [2], now=0.5, ttls=TTLS)
    assert entry is not None and evicted is not None
    assert evicted.tokens == (2, 2)
    assert [tokens for (_, tokens), _ in cache.items()] == [(1, 1), (3, 3)]


def test_a_lookup_never_uses_an_entry_at_its_warm_expiry() -> None:
    cache = PrefixCache(capacity=4)
    cache.publish("k", (1, 2, 3), [0], now=0.0, ttls=TTLS)
    assert cache.lookup("k", (1, 2, 3), now=4.999, exact=True).cache == "warm"
    found = cache.lookup("k", (1, 2, 3), now=5.0, exact=True)  # what expire(5.0) drops
    assert (found.cache, found.reused, found.entry) == ("cold", 0, None)


def test_bounded_recovery_reuses_only_entries_whose_whole_prefix_matches() -> None:
    config = EngineConfig(recovery_mode="mask", keep=64, block_size=4)
    engine = Engine(TinyModel(seed=3), None, config=config, clock=ManualClock())
    engine.generate([1, 2, 3, 4, 5, 6], max_tokens=2)  # publishes [1..6] and [1..6, g1]
    partial = engine.submit([1, 2, 3, 9, 9], max_tokens=2)  # shares 3 positions with both
    restore = restore_of(drain(engine), partial)
    assert (restore["cache"], restore["reused_positions"]) == ("cold", 0)
    whole = engine.submit([1, 2, 3, 4, 5, 6, 7, 7], max_tokens=2)  # [1..6] is a prefix
    restore = restore_of(drain(engine), whole)
    assert (restore["cache"], restore["reused_positions"]) == ("hot", 6)
    check_against_oracle(engine, whole)


def test_a_lookup_hit_makes_its_entry_the_most_recently_used() -> None:
    cache = PrefixCache(capacity=2)
    cache.publish("k", (1, 1), [0], now=0.0, ttls=TTLS)
    cache.publish("k", (2, 2), [1], now=0.0, ttls=TTLS)
    assert cache.lookup("k", (1, 1, 5), now=0.5, exact=True).reused == 2
    _, evicted = cache.publish("k", (3, 3), [2], now=0.5, ttls=TTLS)
    assert evicted is not None and evicted.tokens == (2, 2)


def test_a_prompt_sharing_no_token_with_live_entries_restores_cold() -> None:
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=ManualClock())
    engine.generate([1, 2, 3], max_tokens=2)
    other = engine.submit([7, 8, 9], max_tokens=2)
    restore = restore_of(drain(engine), other)
    assert (restore["cache"], restore["reused_positions"]) == ("cold", 0)
    assert engine.metrics()["cache"] == {"hot": 0, "warm": 0, "cold": 2}


def test_a_request_for_zero_tokens_computes_only_what_the_cache_lacks() -> None:
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)  # a prefix to restore from
    for prompt, cache, reused in (([5, 6, 7], "cold", 0), ([1, 2, 3, 4, 9], "hot", 4)):
        before = engine.metrics()["work"]["encoder_rows"]
        rid = engine.submit(prompt, max_tokens=0)
        events = engine.step()
        kinds = [e["kind"] for e in events if e["request_id"] == rid]
        assert kinds[0] == "restore" and kinds[-2:] == ["publish", "finished"]
        restore = restore_of(events, rid)
        assert (restore["cache"], restore["reused_positions"]) == (cache, reused)
        # Every position the cache did not cover is computed, the last one too.
        assert restore["encoder_rows"] == len(prompt) - reused
        assert engine.metrics()["work"]["encoder_rows"] - before == len(prompt) - reused
        assert engine.result(rid).tokens == ()
        check_against_oracle(engine, rid)


@pytest.mark.parametrize("prompt", [[5, 6, 7], [1, 2, 3, 4, 9], [1, 2, 3, 4]])
def test_a_restore_computes_the_positions_the_cache_did_not_cover(prompt: list[int]) -> None:
    """What the debugger shows as "computed": the encoder rows, one per uncovered position."""
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)
    rid = engine.submit(prompt, max_tokens=2)
    restore = restore_of(engine.step(), rid)
    assert restore["encoder_rows"] == restore["suffix_positions"] > 0
    assert restore["reused_positions"] + restore["suffix_positions"] == len(prompt)


def test_the_cache_never_holds_an_entry_without_positions() -> None:
    target = TinyModel(seed=3)
    independent = TinyModel(seed=99, depth=1)  # keeps its own rows, which lag at first
    engine = Engine(target, independent, config=EngineConfig(block_size=2), clock=ManualClock())
    for prompt in ([1, 2, 3], [4, 4], [6]):
        engine.submit(prompt, max_tokens=3)
    publishes = events_of(drain(engine), "publish")
    assert publishes and all(p["positions"] > 0 and p["blocks"] for p in publishes)
    assert all(entry["tokens"] for entry in engine.snapshot()["cache"])


def test_a_warm_restore_republishes_nothing_as_hot_before_its_consumers_are_recomputed() -> None:
    clock = ManualClock()
    target = TinyModel(seed=3)
    independent = TinyModel(seed=7, depth=1)  # keeps its own rows in the blocks
    engine = Engine(target, independent, config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2, 3, 4, 5, 6], max_tokens=3)
    clock.now = 10.0  # hot cursors expired at 3s; encoder prefixes live until 100s
    warm = engine.submit([1, 2, 3, 4, 5, 6, 7, 8], max_tokens=6)
    engine.step()  # the target replays its consumers; the draft has not run yet
    assert restore_of(engine.trace, warm)["cache"] == "warm"
    probe = engine.submit([1, 2, 3, 4, 5, 6, 9, 9], max_tokens=2)
    events = drain(engine)
    restore = restore_of(events, probe)
    assert (restore["cache"], restore["reused_positions"]) == ("warm", 6)
    check_against_oracle(engine, probe)


def test_cancelling_a_running_request_publishes_nothing_more() -> None:
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=8)
    for _ in range(4):
        engine.step()
    cached, start = engine.snapshot()["cache"], len(engine.trace)
    assert engine.cancel(rid)
    assert engine.snapshot()["cache"] == cached
    assert not events_of(engine.trace[start:], "publish")


def test_expired_entries_are_not_counted_as_evictions() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(prefix_ttl=5.0), clock=clock)
    engine.generate([1, 2, 3], max_tokens=2)
    clock.now = 6.0
    events = engine.step()
    expired = events_of(events, "evict")
    assert expired and all(e["reason"] == "expired" for e in expired)
    assert engine.snapshot()["cache"] == []
    assert engine.metrics()["requests"]["evictions"] == 0


def test_an_entry_past_its_warm_time_is_expired_until_the_next_round_releases_it() -> None:
    clock = ManualClock()
    config = EngineConfig(block_size=2, state_ttl=1.0, prefix_ttl=5.0)
    engine = Engine(TinyModel(seed=3), config=config, clock=clock)
    engine.generate([1, 2, 3, 4, 5], max_tokens=2)  # publishes its prompt, then all of it
    entries = engine.snapshot()["cache"]
    assert [(e["hot_until"], e["warm_until"]) for e in entries] == [(1.0, 5.0)] * 2
    held = sorted({b for e in entries for b in e["blocks"]})
    for now, state in ((0.5, "hot"), (1.0, "warm"), (4.9, "warm"), (5.0, "expired")):
        clock.now = now
        assert cache_states(engine) == [state] * 2, f"at {now}s"
    # Nothing has released the blocks yet: the engine expires entries when a round starts.
    assert engine.metrics()["blocks"]["cached"] == len(held)
    blocks = engine.snapshot()["pool"]["blocks"]
    assert [blocks[b]["state"] for b in held] == ["cached"] * len(held)

    other = engine.submit([9, 9], max_tokens=1)  # not a prefix: the round has its own work
    events = engine.step()
    assert [e["reason"] for e in events if e["kind"] == "evict"] == ["expired"] * 2
    assert [e["tokens"][:2] for e in engine.snapshot()["cache"]] == [[9, 9]]  # the new one
    blocks = engine.snapshot()["pool"]["blocks"]
    # Released: kept only for the undo history (refcount 0), no longer cached.
    assert {(blocks[b]["state"], blocks[b]["refcount"]) for b in held} == {("retained", 0)}
    check_block_invariants(engine)
    engine.undo()
    assert cache_states(engine) == ["expired"] * 2
    drain(engine)
    check_against_oracle(engine, other)


def test_a_hot_time_after_the_warm_time_does_not_keep_an_entry_alive() -> None:
    clock = ManualClock()
    config = EngineConfig(block_size=2, state_ttl=10.0, prefix_ttl=5.0)
    engine = Engine(TinyModel(seed=3), config=config, clock=clock)
    engine.generate([1, 2, 3, 4, 5], max_tokens=2)
    clock.now = 4.0
    assert cache_states(engine) == ["hot"] * 2
    clock.now = 6.0
    assert cache_states(engine) == ["expired"] * 2
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=2)
    events = engine.step()
    assert [e["cache"] for e in events if e["kind"] == "restore"] == ["cold"]
    drain(engine)
    check_against_oracle(engine, rid)


def test_a_one_position_restore_says_position() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=3), config=EngineConfig(block_size=2), clock=clock)
    engine.generate([1, 2], max_tokens=1)  # publishes the 1-position prefix [1] first
    engine.submit([1, 5], max_tokens=1)
    (hot,) = [e for e in engine.step() if e["kind"] == "restore"]
    clock.now = 50.0  # past the hot cursor, before the warm prefix expires
    engine.submit([1, 6], max_tokens=1)
    (warm,) = [e for e in engine.step() if e["kind"] == "restore"]
    assert (hot["cache"], hot["reused_positions"]) == ("hot", 1)
    assert (warm["cache"], warm["reused_positions"]) == ("warm", 1)
    assert "over 1 position," in hot["reason"]
    assert "prefix of 1 position alive" in warm["reason"]
