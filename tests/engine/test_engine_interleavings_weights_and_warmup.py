"""Random interleavings with zero-token warm-ups and replaced target weights (issue #19).

Operations: submit (zero-token requests and prompts that share prefixes among them), step,
run, cancel, rollback, undo, clock moves and replacing the target's weights with one of three
sets (the original set too, so a change can be undone). Pools are sometimes small enough to
preempt. After every operation the block invariants hold; at the end every request that
finished "stop" or "length" computed under one set of weights only and equals that set's
oracle, a request that computed under two sets failed with an error naming the change, and
run() delivers results in submission order.

Which weights a request computed under is read from the trace: every `restore` and `commit`
event is tagged with the target's identity when the operation that emitted it ran (undo
removes the events of the rounds it rewinds, and with them their tags).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from engine import Engine, EngineConfig, TinyModel, greedy_generate, make_draft, pool_blocks
from tests.engine.helpers import (
    _PREFIX_HASHES,
    TOLERANCE,
    ManualClock,
    check_block_invariants,
    check_live_prefixes,
    check_nothing_orphaned,
    drain,
)

Operation = tuple[Any, ...]
WEIGHT_SETS = 3  # set 0 is the target's own; sets 1 and 2 replace it
COMPUTES = ("restore", "commit")  # events of a round that computed or restored its rows

PROMPTS = st.lists(st.integers(0, 3), min_size=1, max_size=6)  # tiny alphabet: shared prefixes
ARGUMENTS: dict[str, tuple[st.SearchStrategy[Any], ...]] = {
    "submit": (PROMPTS, st.sampled_from([0, 0, 1, 2, 4, 6]), st.sampled_from([None, None, 5])),
    "step": (),
    "run": (st.integers(1, 3),),
    "cancel": (st.integers(0, 7),),
    "rollback": (st.integers(0, 7), st.integers(1, 3)),
    "undo": (),
    "clock": (st.sampled_from([0.5, 3.0, 50.0, 150.0]),),
    "weights": (st.integers(0, WEIGHT_SETS - 1),),
}
FREQUENCIES = {
    "submit": 4,
    "step": 8,
    "run": 1,
    "cancel": 1,
    "rollback": 2,
    "undo": 2,
    "clock": 1,
    "weights": 3,
}
KINDS = [kind for kind, weight in FREQUENCIES.items() for _ in range(weight)]
OPERATIONS = st.lists(
    st.sampled_from(KINDS).flatmap(lambda kind: st.tuples(st.just(kind), *ARGUMENTS[kind])),
    min_size=16,
    max_size=40,
)


@dataclass(frozen=True)
class Setup:
    seed: int
    window: int
    draft: str  # "none", "early" (make_draft: reads the target's KV) or "own" (its own KV)
    config: dict[str, Any]


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    if draw(st.integers(0, 2)):  # mostly small enough to defer and preempt
        blocks = draw(st.integers(*{1: (6, 14), 2: (3, 8), 4: (2, 5), 16: (1, 3)}[block_size]))
    else:
        blocks = 2048 // block_size
    config = dict(
        block_size=block_size,
        num_blocks=blocks,
        max_active=draw(st.integers(1, 3)),
        max_batch_tokens=draw(st.integers(1, 12)),
        draft_width=draw(st.integers(1, 4)),
        undo_depth=draw(st.sampled_from([0, 2, 64])),
        cache_capacity=draw(st.sampled_from([1, 2, 64])),
        recovery_mode="exact",
    )
    return Setup(
        seed=draw(st.integers(0, 5)),
        window=draw(st.sampled_from([1, 2, 4, 8])),
        draft=draw(st.sampled_from(["none", "early", "early", "own"])),
        config=config,
    )


@dataclass
class World:
    """The engine, its weight sets and what the test knows independently of the engine."""

    engine: Engine
    clock: ManualClock
    oracles: dict[str, TinyModel]  # identity -> a model holding those weights
    weights: list[Any]
    submitted: list[str] = field(default_factory=list)  # ids in submission order
    tags: list[str] = field(default_factory=list)  # target identity of each trace event
    hashes_of: str = ""  # identity of the weights the shown blocks were hashed under
    before_steps: list[str] = field(default_factory=list)  # `hashes_of` before each step
    # identity -> the prefix hashes seen under it (see `use_hash_records`)
    hash_records: dict[str, dict[tuple[int, ...], str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hashes_of = self.identity
        self.sync_tags()

    @property
    def identity(self) -> str:
        return self.engine.target.identity

    def sync_tags(self) -> None:
        """Tag the trace's new events with the weights in force (undo shortens the trace)."""
        trace = self.engine.trace
        del self.tags[len(trace) :]
        self.tags.extend([self.identity] * (len(trace) - len(self.tags)))

    def computed_under(self, request_id: str) -> set[str]:
        return {
            tag
            for tag, event in zip(self.tags, self.engine.trace)
            if event["request_id"] == request_id
            and event["kind"] in COMPUTES
            # A cold restore attaches nothing: rows come only with the round that commits.
            and (event["kind"] != "restore" or event["reused_positions"] > 0)
        }

    def rounds_ran(self, count: int) -> None:
        self.before_steps += [self.hashes_of] + [self.identity] * (count - 1)
        self.hashes_of = self.identity

    def use_hash_records(self, identity: str) -> None:
        """A block's hash chains from the cache key, which names the weights: the same prefix
        hashes differently under other weights. The helper's record of prefix -> hash is
        therefore kept per set of weights (the blocks shown were all hashed under one)."""
        _PREFIX_HASHES[self.engine] = self.hash_records.setdefault(identity, {})

    def check(self) -> dict[str, Any]:
        self.use_hash_records(self.hashes_of)
        snapshot = check_block_invariants(self.engine)
        check_nothing_orphaned(self.engine)
        return snapshot


def build(setup: Setup) -> World:
    models = [TinyModel(seed=setup.seed + 50 * k, window=setup.window) for k in range(WEIGHT_SETS)]
    target = TinyModel(seed=setup.seed, window=setup.window)
    draft = {
        "none": None,
        "early": make_draft(target, seed=setup.seed + 1),
        "own": TinyModel(seed=99, depth=1, window=setup.window),
    }[setup.draft]
    clock = ManualClock()
    engine = Engine(target, draft, config=EngineConfig(**setup.config), clock=clock)
    return World(engine, clock, {m.identity: m for m in models}, [m.weights for m in models])


def check_submission_order(world: World, results: list[Any]) -> None:
    ids = [result.request_id for result in results]
    assert len(ids) == len(set(ids)), f"run() delivered a result twice: {ids}"
    rank = {rid: index for index, rid in enumerate(world.submitted)}
    assert ids == sorted(ids, key=rank.__getitem__), f"run() order {ids}"


def check_live(world: World) -> None:
    """Unfinished requests equal the oracle so far, when none holds rows of older weights."""
    views = world.engine.snapshot()["requests"]
    unfinished = [view["id"] for view in views if view["status"] != "finished"]
    if not any(world.computed_under(rid) - {world.identity} for rid in unfinished):
        check_live_prefixes(world.engine)


def apply(world: World, operation: Operation) -> None:
    """One operation, then the invariants and what the test knows independently."""
    engine, kind = world.engine, operation[0]
    views = engine.snapshot()["requests"]
    ids = [view["id"] for view in views]
    if kind == "submit":
        _, prompt, max_tokens, eos_id = operation
        before = engine.snapshot()
        try:
            world.submitted.append(engine.submit(prompt, max_tokens=max_tokens, eos_id=eos_id))
        except ValueError as error:  # only a request that can never fit is refused
            assert "blocks" in str(error) and "raise num_blocks" in str(error)
            assert engine.snapshot() == before
    elif kind == "step":
        engine.step()
        world.rounds_ran(1)
    elif kind == "run":
        tick = engine.tick
        check_submission_order(world, engine.run(max_steps=operation[1], raise_on_error=False))
        if engine.tick > tick:
            world.rounds_ran(engine.tick - tick)
    elif kind == "cancel" and ids:
        engine.cancel(ids[operation[1] % len(ids)])
    elif kind == "rollback" and ids:
        view = views[operation[1] % len(ids)]
        try:
            removed = engine.rollback(view["id"], operation[2])
        except ValueError:
            assert view["finish_reason"] in ("cancelled", "error")
        else:
            assert len(removed) == min(operation[2], len(view["generated"]))
        check_live(world)
    elif kind == "undo" and engine.undo_available:
        engine.undo()  # also forgets what was submitted after the step it rewinds
        world.hashes_of = world.before_steps.pop()
        world.submitted = [rid for rid in world.submitted if rid in engine.requests]
        check_live(world)
    elif kind == "clock":
        world.clock.advance(operation[1])
    elif kind == "weights":
        engine.target.weights = world.weights[operation[1]]
    world.sync_tags()
    world.check()


def check_request(world: World, view: dict[str, Any]) -> None:
    """A finished request against the oracle of the weights it computed under."""
    engine, rid = world.engine, view["id"]
    result = engine.result(rid)
    under = world.computed_under(rid)
    if result.finish_reason == "error":  # only a weight change fails a request here
        assert "weights changed" in (result.error or ""), result.error
        last = max(i for i, e in enumerate(engine.trace) if e["request_id"] == rid)
        assert under - {world.tags[last]}, f"{rid} failed without computing under old weights"
    if len(under) != 1:
        assert result.finish_reason in ("error", "cancelled") or not under, (
            f"{rid} computed under {len(under)} sets of weights and finished "
            f"{result.finish_reason!r}"
        )
        return
    (identity,) = under
    model = world.oracles[identity]
    if result.finish_reason in ("stop", "length"):
        oracle = greedy_generate(model, result.prompt, max_tokens=view["max_tokens"],
                                 eos_id=view["eos_id"])  # fmt: skip
        assert result.tokens == oracle.tokens, f"{rid}: {result.tokens} != {oracle.tokens}"
        if identity == world.identity:  # committed_state reads the weights in force
            error = engine.committed_state(rid).max_error(oracle.state)
            assert error < TOLERANCE, f"{rid}: committed state differs by {error}"
    else:  # what was committed before it failed or was cancelled is the old oracle's
        oracle = greedy_generate(model, result.prompt, max_tokens=len(result.tokens))
        assert result.tokens == oracle.tokens, f"{rid}: {result.tokens} is not a prefix"


def finish(world: World) -> None:
    world.check()
    world.use_hash_records(world.identity)  # what every round of the drain leaves shown
    tick = world.engine.tick
    drain(world.engine, max_steps=600)  # checks the invariants after every round
    world.rounds_ran(world.engine.tick - tick)
    world.sync_tags()
    results = world.engine.run(raise_on_error=False)
    check_submission_order(world, results)
    assert world.engine.run() == []
    views = world.engine.snapshot()["requests"]
    assert [v["id"] for v in views] == [i for i in world.submitted if i in world.engine.requests]
    for view in views:
        check_request(world, view)
    world.clock.advance(10_000.0)  # every cache entry expires at the next round
    world.engine.step()
    world.rounds_ran(1)
    assert world.check()["cache"] == []


def play(setup: Setup, operations: list[Operation]) -> None:
    world = build(setup)
    for operation in operations:
        apply(world, operation)
    finish(world)


COMMON = dict(
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # a failure is reported unshrunk, but at once
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROOMY = dict(block_size=4, num_blocks=64, max_active=2, undo_depth=64)
# A warm-up, a request extending it, the weights replaced while it runs and put back.
CHANGE_AND_BACK = (
    Setup(1, 4, "early", ROOMY),
    [
        ("submit", [1, 2, 3], 0, None),
        ("step",),
        ("submit", [1, 2, 3, 0], 4, None),
        ("step",),
        ("weights", 1),
        ("submit", [1, 2], 3, None),
        ("step",),
        ("undo",),
        ("weights", 0),
        ("step",),
        ("weights", 2),
    ],
)
# Undo past the round that failed a request for a weight change: it must fail again.
UNDO_PAST_A_CHANGE = (
    Setup(2, 2, "own", ROOMY),
    [
        ("submit", [0, 1, 2], 5, None),
        ("submit", [0, 1], 0, None),
        ("step",),
        ("weights", 2),
        ("step",),
        ("undo",),
        ("submit", [0, 1, 2, 3], 2, None),
        ("step",),
    ],
)
# A warm-up beside an older request on a two-block pool: eviction for space and deferral,
# then the weights change under the deferred request.
DEFERRED_THEN_CHANGED = (
    Setup(0, 2, "none", dict(block_size=4, num_blocks=2, max_active=2, undo_depth=2)),
    [
        ("submit", [3, 1, 2], 5, None),
        ("submit", [3, 1, 2, 2], 0, None),
        ("step",),
        ("step",),
        ("weights", 1),
        ("step",),
    ],
)


@settings(max_examples=80, **COMMON)
@example(*CHANGE_AND_BACK)
@example(*UNDO_PAST_A_CHANGE)
@example(*DEFERRED_THEN_CHANGED)
@given(setup=setups(), operations=OPERATIONS)
def test_interleavings_with_warm_ups_and_replaced_weights_stay_exact(
    setup: Setup, operations: list[Operation]
) -> None:
    play(setup, operations)


# A finished request rolled back after a round has seen the new weights: it finishes "length"
# with tokens of both models (computed under two sets of weights, and not failed).
REOPENED_AFTER_CHANGE = (
    Setup(8, 4, "none", ROOMY),
    [
        ("submit", [1, 2, 3], 4, None),
        ("run", 10),
        ("weights", 1),
        ("step",),
        ("rollback", 0, 2),
    ],
)


def test_a_request_reopened_after_a_weight_change_is_checked_again() -> None:
    play(*REOPENED_AFTER_CHANGE)


def finished_then_replaced(max_tokens: int) -> tuple[Engine, str]:
    """A request finished under seed 8's weights, then the target's replaced by seed 9's."""
    target = TinyModel(seed=8)
    engine = Engine(target, None, config=EngineConfig(num_blocks=64), clock=ManualClock())
    rid = engine.generate([1, 2, 3], max_tokens=max_tokens).request_id
    target.weights = TinyModel(seed=9).weights
    return engine, rid


def test_rolling_back_a_request_of_replaced_weights_fails_it() -> None:
    engine, rid = finished_then_replaced(max_tokens=4)
    engine.step()  # a round sees the new weights (with other requests it would be running)
    engine.rollback(rid, 2)  # keeps two tokens of the old weights
    engine.run(raise_on_error=False)
    result = engine.result(rid)
    old = greedy_generate(TinyModel(seed=8), [1, 2, 3], max_tokens=4).tokens
    new = greedy_generate(engine.target, [1, 2, 3], max_tokens=4).tokens
    assert result.finish_reason == "error", f"{result.tokens}: old {old}, new {new}"
    assert "weights changed" in (result.error or "")


def test_committed_state_after_a_weight_change_is_refused_until_they_are_back() -> None:
    """The last row of a finished request is computed on demand: with other weights in force
    it would be the new model's, so the engine says so instead of returning a mixed state."""
    oracle = greedy_generate(TinyModel(seed=8), [1, 2, 3], max_tokens=3)
    engine, rid = finished_then_replaced(max_tokens=3)
    with pytest.raises(ValueError, match="weights since replaced"):
        engine.committed_state(rid)
    engine.target.weights = TinyModel(seed=8).weights  # the same values again
    assert engine.committed_state(rid).max_error(oracle.state) < TOLERANCE


def test_a_request_deferred_before_computing_anything_goes_on_under_new_weights() -> None:
    target = TinyModel(seed=0)
    config = EngineConfig(block_size=4, num_blocks=2, max_active=2, undo_depth=0)
    engine = Engine(target, None, config=config, clock=ManualClock())
    engine.submit([1, 2, 3, 4, 5, 6, 7], max_tokens=1)  # takes the whole pool
    waiting = engine.submit([2, 3], max_tokens=2)
    events = engine.step()
    assert [e["kind"] for e in events if e["request_id"] == waiting] == ["restore", "deferred"]
    view = next(v for v in engine.snapshot()["requests"] if v["id"] == waiting)
    assert (view["blocks"], view["generated"]) == ([], [])  # it holds and computed nothing
    target.weights = TinyModel(seed=5).weights
    drain(engine)
    result = engine.result(waiting)
    assert result.finish_reason == "length", result.error  # "... after its KV was computed"
    assert result.tokens == greedy_generate(target, [2, 3], max_tokens=2).tokens


def test_a_pool_sized_from_memory_never_exceeds_its_budget() -> None:
    model = TinyModel()
    position_bytes = 8 * model.layout.size  # float64 rows of one position of the target
    for block_size in (1, 16, 2**12):
        config = EngineConfig(block_size=block_size, kv_cache_memory_mib=1.0)
        try:
            blocks = pool_blocks(config, model)
        except ValueError as error:  # refusing, naming the setting, would do too
            assert "kv_cache_memory_mib" in str(error)
            continue
        assert blocks * block_size * position_bytes <= 2**20, (block_size, blocks)
