"""Going back (issue 5) and failing safely: rollback, undo, forward failures, interrupts."""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from engine import Engine, EngineConfig, RequestError, TinyModel, greedy_generate, make_draft
from tests.engine.helpers import (
    INTERRUPT_POINTS,
    ManualClock,
    TrippingClock,
    Tripwire,
    check_against_oracle,
    check_all_finished,
    check_block_invariants,
    check_nothing_orphaned,
    drain,
    events_of,
    install,
    request_view,
    restore_of,
    wire,
)

CONFIGS = [
    ("none", dict(block_size=1)),
    ("close", dict(block_size=2, draft_width=3)),
    ("close", dict(block_size=4, draft_width=4, draft_branching=2, undo_depth=0)),
    ("copy", dict(block_size=16, draft_width=5, draft_branching=3)),
]


def make_engine(draft: str, config: dict[str, Any], *, seed: int = 3) -> Engine:
    target = TinyModel(seed=seed)
    draft_model = {
        "none": None,
        "close": make_draft(target, seed=seed + 1),
        "copy": make_draft(target, depth=target.depth, noise=0.0),
    }[draft]
    return Engine(target, draft_model, config=EngineConfig(**config), clock=ManualClock())


# -- rollback ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("draft", "config"), CONFIGS)
@pytest.mark.parametrize("count", [1, 3, 7])
def test_rollback_of_a_finished_request_is_exact_and_reproducible(
    draft: str, config: dict[str, Any], count: int
) -> None:
    engine = make_engine(draft, config)
    rid = engine.submit([2, 7, 1, 8], max_tokens=8)
    neighbour = engine.submit([2, 7, 1, 9], max_tokens=5)  # shares blocks via the cache
    drain(engine)
    original = engine.result(rid).tokens
    assert {r.request_id for r in engine.run()} == {rid, neighbour}  # delivered once...

    removed = engine.rollback(rid, count)
    assert removed == list(original[-count:])
    snapshot = check_block_invariants(engine)
    view = request_view(snapshot, rid)
    assert view["status"] == "queued" and rid in snapshot["queue"]  # reopened
    assert view["generated"] == list(original[:-count])
    (event,) = [e for e in engine.trace[-1:] if e["kind"] == "rollback"]
    assert event["request_id"] == rid and event["removed"] == removed
    # The shorter prefix's committed state is the oracle's, before anything runs again.
    shorter = greedy_generate(engine.target, [2, 7, 1, 8], max_tokens=len(original) - count)
    assert engine.committed_state(rid).max_error(shorter.state) < 1e-10

    drain(engine)
    again = engine.result(rid)
    assert again.tokens == original  # determinism: the same tokens come back
    check_against_oracle(engine, rid)
    check_against_oracle(engine, neighbour)
    assert [r.request_id for r in engine.run()] == [rid]  # ...and delivered again once


@pytest.mark.parametrize(("draft", "config"), CONFIGS)
def test_rollback_of_a_running_request_keeps_it_queued_and_exact(
    draft: str, config: dict[str, Any]
) -> None:
    engine = make_engine(draft, config)
    rid = engine.submit([3, 1, 4, 1, 5], max_tokens=14)
    other = engine.submit([9, 2, 6], max_tokens=6)
    engine.step()
    engine.step()
    before = request_view(engine.snapshot(), rid)["generated"]
    assert 0 < len(before) < 14
    removed = engine.rollback(rid, 2)
    assert removed == before[-2:]
    snapshot = check_block_invariants(engine)
    assert request_view(snapshot, rid)["status"] != "finished" and rid in snapshot["queue"]
    shorter = greedy_generate(engine.target, [3, 1, 4, 1, 5], max_tokens=len(before) - 2)
    assert engine.committed_state(rid).max_error(shorter.state) < 1e-10
    drain(engine, live=True)
    check_against_oracle(engine, rid)
    check_against_oracle(engine, other)


def test_rollback_of_a_stopped_request_stops_again_at_eos() -> None:
    engine = make_engine("close", dict(block_size=2, draft_width=4))
    free_run = greedy_generate(engine.target, [3, 3, 7], max_tokens=10).tokens
    eos_id = free_run[4]
    rid = engine.submit([3, 3, 7], max_tokens=10, eos_id=eos_id)
    drain(engine)
    stopped = check_against_oracle(engine, rid)
    assert stopped.finish_reason == "stop"
    engine.rollback(rid, 3)
    drain(engine)
    again = check_against_oracle(engine, rid)
    assert (again.tokens, again.finish_reason) == (stopped.tokens, "stop")


def test_rollback_is_clamped_at_the_prompt() -> None:
    engine = make_engine("close", dict(block_size=2))
    rid = engine.submit([5, 5, 1], max_tokens=4)
    drain(engine)
    generated = engine.result(rid).tokens
    assert engine.rollback(rid, 100) == list(generated)
    prompt_only = greedy_generate(engine.target, [5, 5, 1], max_tokens=0)
    assert engine.committed_state(rid).max_error(prompt_only.state) < 1e-10
    assert request_view(engine.snapshot(), rid)["can_rollback"] is False
    drain(engine)
    assert check_against_oracle(engine, rid).tokens == generated


def test_rollback_then_cache_users_still_see_exact_prefixes() -> None:
    engine = make_engine("close", dict(block_size=2, draft_width=3))
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=6)
    drain(engine)
    first = engine.result(rid).tokens[0]
    engine.rollback(rid, 4)
    follower = engine.submit([1, 2, 3, 4, 5, first], max_tokens=5)
    drain(engine)
    check_against_oracle(engine, rid)
    check_against_oracle(engine, follower)


@pytest.mark.parametrize("tokens", [0, -1, True, 1.5, "2", None])
def test_rollback_rejects_bad_counts_and_changes_nothing(tokens: object) -> None:
    engine = make_engine("close", {})
    rid = engine.submit([1, 2], max_tokens=3)
    drain(engine)
    before, trace = engine.snapshot(), len(engine.trace)
    with pytest.raises(ValueError, match="tokens"):
        engine.rollback(rid, tokens)  # type: ignore[arg-type]
    assert engine.snapshot() == before and len(engine.trace) == trace


def test_rollback_of_cancelled_or_unknown_requests_raises_and_changes_nothing() -> None:
    engine = make_engine("close", {})
    cancelled = engine.submit([1, 2, 3], max_tokens=6)
    engine.step()
    engine.cancel(cancelled)
    before, trace = engine.snapshot(), len(engine.trace)
    with pytest.raises(ValueError, match="cancelled"):
        engine.rollback(cancelled, 1)
    with pytest.raises(KeyError, match="nope"):
        engine.rollback("nope", 1)
    assert engine.snapshot() == before and len(engine.trace) == trace
    assert request_view(before, cancelled)["can_rollback"] is False


def test_rollback_on_a_full_pool_succeeds_or_changes_nothing() -> None:
    config = EngineConfig(block_size=2, num_blocks=3)
    engine = Engine(TinyModel(seed=0), None, config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=3)
    engine.step()
    engine.step()
    assert engine.metrics()["blocks"]["free"] == 0
    before = engine.snapshot()
    try:
        engine.rollback(rid, 1)
    except ValueError:
        assert engine.snapshot() == before
    else:
        assert events_of(engine.trace[-1:], "rollback")
    drain(engine)
    check_against_oracle(engine, rid)


# -- undo ---------------------------------------------------------------------------------------


def busy_engine(draft: str, config: dict[str, Any]) -> Engine:
    engine = make_engine(draft, config)
    engine.generate([1, 2, 3], max_tokens=3)  # a cached prefix to restore from
    for prompt, max_tokens in (([1, 2, 3, 4], 9), ([6, 6], 7), ([1, 2, 3, 5], 5)):
        engine.submit(prompt, max_tokens=max_tokens)
    return engine


@pytest.mark.parametrize(("draft", "config"), [c for c in CONFIGS if "undo_depth" not in c[1]])
def test_undo_then_step_reproduces_every_round_exactly(draft: str, config: dict[str, Any]) -> None:
    engine = busy_engine(draft, config)
    while not engine.idle:
        before, trace = engine.snapshot(), len(engine.trace)
        events = engine.step()
        after = engine.snapshot()
        assert engine.undo() == events  # undo returns the round it took back
        assert engine.snapshot() == before  # tick, queue, blocks, cache, metrics, ...
        assert len(engine.trace) == trace
        assert engine.step() == events  # the same round again, event for event
        assert engine.snapshot() == after
        check_block_invariants(engine)
    check_all_finished(engine)


def test_undo_several_rounds_then_replay_them() -> None:
    engine = busy_engine("close", dict(block_size=2, draft_width=3))
    snapshots, rounds = [engine.snapshot()], []
    for _ in range(4):
        rounds.append(engine.step())
        snapshots.append(engine.snapshot())
    for index in range(4, 0, -1):
        engine.undo()
        assert engine.snapshot() == snapshots[index - 1]
        check_block_invariants(engine)
    for index in range(4):
        assert engine.step() == rounds[index]
        assert engine.snapshot() == snapshots[index + 1]
    drain(engine)
    check_all_finished(engine)


def test_undo_rewinds_cancels_and_submissions_made_after_the_step() -> None:
    engine = busy_engine("close", dict(block_size=4))
    before = engine.snapshot()
    engine.step()
    victim = before["queue"][0]
    engine.cancel(victim)
    engine.submit([8, 8, 8], max_tokens=2)
    engine.undo()
    assert engine.snapshot() == before
    drain(engine)
    check_all_finished(engine)


@pytest.mark.parametrize(("draft", "config"), [c for c in CONFIGS if "undo_depth" not in c[1]])
@pytest.mark.parametrize("count", [1, 3, 6])
def test_undo_rewinds_rollbacks_made_after_the_step(
    draft: str, config: dict[str, Any], count: int
) -> None:
    # Undo history shares each request's token list (see _Checkpoint.lengths): a rollback
    # that cut into the part the checkpoint saw must not reach the checkpoint's copy.
    engine = busy_engine(draft, config)
    for _ in range(3):
        engine.step()
    before = engine.snapshot()
    engine.step()
    for view in engine.snapshot()["requests"]:
        if view["can_rollback"]:
            engine.rollback(view["id"], count)
    engine.undo()
    assert engine.snapshot() == before
    drain(engine)
    check_all_finished(engine)


def history_growth_per_round(prompt_length: int) -> float:
    """Traced bytes each round adds with undo history on, 8 requests of `prompt_length`."""
    engine = Engine(
        TinyModel(seed=3),
        config=EngineConfig(
            max_active=8, num_blocks=1200, block_size=16, undo_depth=1000, token_budget=None
        ),
        clock=ManualClock(),
    )
    for i in range(8):
        engine.submit([(i + j) % 32 for j in range(prompt_length)], max_tokens=60)
    for _ in range(3):
        engine.step()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(40):
            engine.step()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (end - start) / 40


def test_undo_history_does_not_copy_every_requests_tokens_each_round() -> None:
    # Copying 8 token lists of 2000 would add 8 x 1900 x 8 bytes per round over short ones.
    longer = history_growth_per_round(2000) - history_growth_per_round(100)
    assert longer < 8 * 1900 * 8 / 4, longer


def test_undo_restores_cache_entries_and_their_expiry() -> None:
    clock = ManualClock()
    engine = Engine(TinyModel(seed=2), None, config=EngineConfig(block_size=2), clock=clock)
    engine.generate([4, 5, 6], max_tokens=3)
    before = engine.snapshot()
    assert before["cache"]
    clock.now = 1000.0  # the next step expires every entry
    events = engine.step()
    assert events_of(events, "evict") and engine.snapshot()["cache"] == []
    engine.undo()
    restored = engine.snapshot()

    def entries(snapshot: dict[str, Any]) -> list[tuple]:
        return [
            (e["tokens"], e["blocks"], e["hot_until"], e["warm_until"]) for e in snapshot["cache"]
        ]

    assert entries(restored) == entries(before)
    assert restored["metrics"] == before["metrics"] and restored["tick"] == before["tick"]


def test_undo_beyond_the_recorded_depth_raises_a_clear_error() -> None:
    engine = busy_engine("close", dict(undo_depth=2))
    for _ in range(5):
        engine.step()
    assert engine.undo_available == 2
    engine.undo()
    engine.undo()
    before = engine.snapshot()
    with pytest.raises(ValueError, match="undo"):
        engine.undo()
    assert engine.snapshot() == before
    assert before["undo"] == {"available": 0, "depth": 2}


def test_undo_with_no_history_explains_why() -> None:
    engine = make_engine("close", dict(undo_depth=0))
    with pytest.raises(ValueError, match="undo"):
        engine.undo()
    engine.generate([1, 2], max_tokens=3)
    with pytest.raises(ValueError, match="undo_depth"):
        engine.undo()


def test_undo_after_a_cache_eviction_keeps_restored_entries_exact() -> None:
    target = TinyModel(seed=0)
    engine = Engine(
        target, None, config=EngineConfig(block_size=4, cache_capacity=2), clock=ManualClock()
    )
    engine.generate([1, 2, 1, 2], max_tokens=1)  # cache entry X
    engine.generate([3, 3, 0, 0], max_tokens=1)  # cache entry A: one block, 4 positions
    b = engine.submit([3, 3, 3, 3], max_tokens=2)  # restores A's first 2 positions (hot)
    c = engine.submit([1, 2, 5], max_tokens=0)  # computes its prompt in B's round
    engine.step()  # B's and c's publishes evict both older entries, A among them
    engine.undo()  # A's entry is back in the cache
    engine.cancel(b)
    engine.cancel(c)
    d = engine.submit([3, 3, 0, 0], max_tokens=3)  # restores 3 positions of A
    drain(engine)
    check_against_oracle(engine, d)


def test_undo_after_history_was_trimmed_for_space_leaks_nothing() -> None:
    clock = ManualClock()
    engine = Engine(
        TinyModel(seed=0), None, config=EngineConfig(block_size=4, num_blocks=2), clock=clock
    )
    engine.generate([1, 2, 3], max_tokens=1)  # publishes one cached block
    clock.now = 1000.0  # which expires at the next step (retained for undo)
    engine.submit([5, 6, 7, 8, 9], max_tokens=3)  # needs both blocks
    engine.step()  # deferred: the expired block is usable next round
    engine.step()  # trims the older history to get that block back, then runs
    engine.undo()
    check_nothing_orphaned(engine)
    drain(engine, max_steps=50)
    check_all_finished(engine)


# -- forward failures ---------------------------------------------------------------------------


def starts_with(item: Any, token: int) -> bool:
    """Whether a batch item computes position 0 holding `token` (a poisoned prompt).

    Keyed on position 0 rather than on any occurrence, so a draft that happens to propose the
    token for a healthy request does not poison that request too.
    """
    return any(int(p) == 0 and int(t) == token for t, p in zip(item.tokens, item.positions))


def poison(model: TinyModel, token: int, failure: Callable[[], BaseException]) -> None:
    """Make `model.forward_rows` fail for any batch with a prompt starting with `token`."""
    original = model.forward_rows

    def forward_rows(batch: list[Any], *args: Any, **kwargs: Any) -> Any:
        if any(starts_with(item, token) for item in batch):
            raise failure()
        return original(batch, *args, **kwargs)

    model.forward_rows = forward_rows  # type: ignore[method-assign]


HEALTHY = ([1, 2, 3], [4, 5, 6, 7], [1, 2, 8])


def unused_token(target: TinyModel, max_tokens: int) -> int:
    seen = set()
    for prompt in HEALTHY:
        seen.update(prompt)
        seen.update(greedy_generate(target, prompt, max_tokens=max_tokens).tokens)
    return next(t for t in range(target.vocab_size - 1, -1, -1) if t not in seen)


@pytest.mark.parametrize(("draft", "config"), CONFIGS[:3])
def test_a_failing_forward_finishes_only_that_request(draft: str, config: dict) -> None:
    engine = make_engine(draft, config)
    bad = unused_token(engine.target, 6)
    poison(engine.target, bad, lambda: RuntimeError("injected forward failure"))
    healthy = [engine.submit(p, max_tokens=6) for p in HEALTHY]
    failing = engine.submit([bad, 1, 2], max_tokens=6)
    with pytest.raises(RequestError) as raised:
        engine.run()
    by_id = {r.request_id: r for r in raised.value.results}
    assert set(by_id) == {*healthy, failing}  # healthy requests drained first
    assert by_id[failing].finish_reason == "error"
    assert "injected forward failure" in (by_id[failing].error or "")
    assert failing in str(raised.value)
    for rid in healthy:
        assert by_id[rid].finish_reason == "length"
        check_against_oracle(engine, rid)
    check_block_invariants(engine)
    with pytest.raises(ValueError, match="error"):
        engine.rollback(failing, 1)
    # A reported error never poisons later requests on the same engine.
    later = engine.submit([1, 2, 3, 4], max_tokens=4)
    results = engine.run()
    assert [r.request_id for r in results] == [later]
    check_against_oracle(engine, later)


def test_non_finite_logits_are_an_error_for_that_request_only() -> None:
    engine = make_engine("none", {})
    bad = unused_token(engine.target, 5)
    original = engine.target.forward_rows

    def forward_rows(batch: list[Any], *args: Any, **kwargs: Any) -> Any:
        outputs = original(batch, *args, **kwargs)
        for item, rows in zip(batch, outputs):
            if starts_with(item, bad):
                rows.logits[...] = float("nan")
        return outputs

    engine.target.forward_rows = forward_rows  # type: ignore[method-assign]
    healthy = engine.submit(HEALTHY[0], max_tokens=5)
    failing = engine.submit([bad, 3], max_tokens=5)
    results = {r.request_id: r for r in engine.run(raise_on_error=False)}
    assert results[failing].finish_reason == "error"
    assert "finite" in (results[failing].error or "")
    assert results[healthy].finish_reason == "length"
    check_against_oracle(engine, healthy)


def test_a_failing_draft_forward_finishes_only_that_request() -> None:
    target = TinyModel(seed=3)
    # An independent draft keeps its own rows, so its first call for a request covers the
    # whole prompt (position 0 included), where the poison is recognised.
    engine = Engine(target, TinyModel(seed=99, depth=1), clock=ManualClock())
    assert engine.draft is not None
    bad = unused_token(engine.target, 6)
    poison(engine.draft, bad, lambda: RuntimeError("injected draft failure"))
    healthy = engine.submit(HEALTHY[0], max_tokens=6)
    failing = engine.submit([bad, 1], max_tokens=6)
    results = {r.request_id: r for r in engine.run(raise_on_error=False)}
    assert results[failing].finish_reason == "error"
    check_against_oracle(engine, healthy)


# -- interrupts --------------------------------------------------------------------------------


def arm_forward(model: TinyModel, call: int, failure: type[BaseException]) -> Callable[[], None]:
    """Make the model's `call`-th forward from now raise; returns a disarm function."""
    return wire(model, "forward_rows", Tripwire(call, failure))


def interrupt_scenario(after_rounds: int) -> tuple[Engine, TrippingClock]:
    """Three requests (one restoring a cached prefix), `after_rounds` rounds in."""
    clock = TrippingClock()
    target = TinyModel(seed=6)
    config = EngineConfig(block_size=2, draft_width=4, draft_branching=2)
    engine = Engine(target, make_draft(target, seed=7), config=config, clock=clock)
    engine.generate([1, 2, 3, 4], max_tokens=3)
    for prompt in ([1, 2, 3, 4, 5], [7, 7], [1, 2, 9]):
        engine.submit(prompt, max_tokens=8)
    for _ in range(after_rounds):
        engine.step()
    return engine, clock


@pytest.mark.parametrize("where", INTERRUPT_POINTS)
@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("after_rounds", [0, 2])
def test_an_interrupt_leaves_the_engine_as_before_the_round(
    where: str, which: str, after_rounds: int
) -> None:
    check_interrupt(where, which, after_rounds, KeyboardInterrupt)


@pytest.mark.parametrize("where", ["target forward", "release"])
def test_system_exit_is_handled_like_an_interrupt(where: str) -> None:
    check_interrupt(where, "last", 1, SystemExit)


def check_interrupt(
    where: str, which: str, after_rounds: int, failure: type[BaseException]
) -> None:
    # A dry run on an identical engine counts the calls this round makes at that point.
    engine, clock = interrupt_scenario(after_rounds)
    counter = Tripwire()
    unwire = install(engine, clock, where, counter)
    engine.step()
    unwire()
    assert counter.calls, f"this round never reaches {where}; the scenario needs updating"

    engine, clock = interrupt_scenario(after_rounds)
    before, trace = engine.snapshot(), list(engine.trace)
    undo_before = engine.undo_available
    unwire = install(
        engine, clock, where, Tripwire(1 if which == "first" else counter.calls, failure)
    )
    with pytest.raises(failure):
        engine.step()
    unwire()

    assert engine.snapshot() == before
    assert engine.undo_available == undo_before
    # The trace is as before, plus at most one note that a round was aborted.
    assert engine.trace[: len(trace)] == trace
    extra = engine.trace[len(trace) :]
    assert [e["kind"] for e in extra] in ([], ["step_aborted"])
    check_block_invariants(engine)
    check_nothing_orphaned(engine)
    drain(engine)
    assert len(check_all_finished(engine)) == 4


def test_repeated_interrupts_then_a_normal_run() -> None:
    target = TinyModel(seed=1)
    draft = make_draft(target, seed=2)
    engine = Engine(target, draft, config=EngineConfig(draft_width=3), clock=ManualClock())
    ids = [engine.submit(p, max_tokens=7) for p in ([4, 3, 2], [4, 3, 9, 9])]
    for call in (1, 2, 1):
        before = engine.snapshot()
        disarm = arm_forward(draft if call == 2 else target, call, KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            engine.step()
        disarm()
        assert engine.snapshot() == before
        engine.step()  # a normal round in between
    drain(engine)
    assert [check_against_oracle(engine, rid).finish_reason for rid in ids] == ["length"] * 2


def test_an_interrupt_after_trimming_history_for_space_leaks_nothing() -> None:
    clock = ManualClock()
    target = TinyModel(seed=0)
    engine = Engine(target, None, config=EngineConfig(block_size=4, num_blocks=2), clock=clock)
    engine.generate([1, 2, 3], max_tokens=1)
    clock.now = 1000.0
    engine.submit([5, 6, 7, 8, 9], max_tokens=3)
    engine.step()  # the expired block is retained for undo; this request is deferred
    disarm = arm_forward(target, 1, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.step()  # trims history (frees the block), then is interrupted
    disarm()
    check_nothing_orphaned(engine)
    drain(engine, max_steps=50)
    check_all_finished(engine)


def test_a_non_finite_forward_does_not_poison_later_batches() -> None:
    # A request whose rows come out NaN fails alone; later healthy batches (which reuse the
    # model's work buffers) must not inherit its NaNs.
    target = TinyModel(seed=0)
    embedding = target.weights.embedding.copy()
    embedding[31] = np.nan
    target.weights = dataclasses.replace(target.weights, embedding=embedding)
    engine = Engine(target, config=EngineConfig(max_active=4), clock=lambda: 0.0)
    poisoned = engine.submit([31] * 6, max_tokens=1)
    healthy = engine.submit([1], max_tokens=1)
    engine.run(raise_on_error=False)
    assert engine.result(poisoned).finish_reason == "error"
    assert engine.result(healthy).finish_reason == "length"
    later = [engine.submit([2], max_tokens=1), engine.submit([4] * 6, max_tokens=1)]
    engine.run(raise_on_error=False)
    for rid in later:
        result = engine.result(rid)
        assert result.finish_reason == "length"
        assert result.tokens == greedy_generate(target, result.prompt, max_tokens=1).tokens


def test_run_rejects_a_bad_max_steps() -> None:
    engine = Engine(TinyModel(seed=0), clock=lambda: 0.0)
    engine.submit([1, 2], max_tokens=2)
    before = engine.snapshot()
    for bad in ("x", -1, 1.5, True):
        with pytest.raises(ValueError, match="max_steps"):
            engine.run(max_steps=bad)
    assert engine.snapshot() == before


def test_a_finished_request_reopened_by_rollback_forgets_its_old_restore() -> None:
    engine = Engine(TinyModel(seed=1), None, clock=ManualClock())
    engine.generate([1, 2, 3, 4], max_tokens=2)
    rid = engine.submit([1, 2, 3, 4, 9], max_tokens=3)
    drain(engine)
    assert request_view(engine.snapshot(), rid)["restore"]["cache"] == "hot"
    engine.rollback(rid, 2)
    view = request_view(engine.snapshot(), rid)
    assert view["status"] == "queued" and view["blocks"] == [] and view["restore"] is None
    restore = restore_of(engine.step(), rid)  # admitted again: a restore of its own
    shown = request_view(engine.snapshot(), rid)["restore"]
    assert shown == {k: v for k, v in restore.items() if k not in ("kind", "request_id", "tick")}
    drain(engine)
    check_against_oracle(engine, rid)


def test_a_rollback_clears_the_rolled_back_rounds_tree_and_commit() -> None:
    target = TinyModel(seed=5)
    engine = Engine(target, make_draft(target, seed=2), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=10)
    for _ in range(3):
        engine.step()
    view = request_view(engine.snapshot(), rid)
    assert view["tree"] is not None and view["last_commit"] is not None
    engine.rollback(rid, 2)
    view = request_view(engine.snapshot(), rid)
    assert (view["tree"], view["last_commit"]) == (None, None)


def test_blocks_released_after_undoing_the_only_recorded_round_are_free_at_once() -> None:
    config = EngineConfig(block_size=2, undo_depth=1, cache_capacity=1)
    engine = Engine(TinyModel(seed=2), None, config=config, clock=ManualClock())
    rid = engine.submit([1, 2, 3, 4, 5], max_tokens=6)
    for _ in range(4):
        engine.step()
    engine.undo()  # back to after round 3: the table has grown past the cached prefix
    assert engine.undo_available == 0
    engine.cancel(rid)  # no history is left that could need its rows
    blocks = engine.snapshot()["metrics"]["blocks"]
    assert blocks["retained"] == 0
    assert blocks["free"] + blocks["cached"] == blocks["total"]


def test_committed_counts_the_tokens_requests_hold_after_a_rollback() -> None:
    target = TinyModel(seed=7)
    engine = Engine(target, make_draft(target, seed=8), clock=ManualClock())
    kept = engine.submit([1, 2, 3], max_tokens=6)
    engine.submit([4, 5], max_tokens=6)
    for _ in range(3):
        engine.step()
    before = engine.metrics()["requests"]["committed_tokens"]
    removed = engine.rollback(kept, 2)
    after = engine.metrics()["requests"]["committed_tokens"]
    assert (
        after
        == before - len(removed)
        == sum(len(r["generated"]) for r in engine.snapshot()["requests"])
    )
    engine.undo()  # rewinds the round before the rollback, and the count with it
    assert engine.metrics()["requests"]["committed_tokens"] == sum(
        len(r["generated"]) for r in engine.snapshot()["requests"]
    )
