"""Bad input: a ValueError (or KeyError for unknown ids) that names the problem, and no change."""

from __future__ import annotations

import json
import math
import re
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from engine import Engine, EngineConfig, RequestError, TinyModel, greedy_generate, make_draft
from tests.engine.helpers import ManualClock, check_against_oracle, drain


@pytest.fixture
def engine() -> Engine:
    """An engine with history: a finished request, a cached prefix and a queued request."""
    target = TinyModel(seed=1)
    config = EngineConfig(block_size=4, num_blocks=8)
    engine = Engine(target, make_draft(target, seed=2), config=config, clock=ManualClock())
    engine.generate([1, 2, 3], max_tokens=3)
    engine.submit([4, 5], max_tokens=2, request_id="waiting")
    return engine


def assert_rejected(engine: Engine, match: str, call: Any, error: type = ValueError) -> None:
    before, trace = engine.snapshot(), list(engine.trace)
    with pytest.raises(error, match=match):
        call()
    assert engine.snapshot() == before, "a rejected call changed the engine"
    assert engine.trace == trace


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ([], "empty"),
        ((), "empty"),
        ([32], "vocabulary"),
        ([1, 2, 99], r"prompt\[2\]"),
        ([-1], "vocabulary"),
        ([True, 2], "integer"),
        ([np.bool_(True)], "integer"),
        ([1.0], "integer"),
        ([1, 2.5], "integer"),
        (["1"], "integer"),
        ([1, None], "integer"),
        (np.array([1.0, 2.0]), "integer"),
        ("abc", "sequence"),
        (b"\x01\x02", "sequence"),
        (None, "sequence"),
        (5, "sequence"),
        (np.array(3), r"1-d array\) of token ids, got a 0-d array"),
        (np.array([[1, 2]]), "got a 2-d array"),
    ],
)
def test_submit_rejects_bad_prompts(engine: Engine, prompt: object, match: str) -> None:
    assert_rejected(engine, match, lambda: engine.submit(prompt, max_tokens=2))
    assert_rejected(engine, "prompt", lambda: engine.submit(prompt, max_tokens=2))


@pytest.mark.parametrize(
    "max_tokens", [-1, 1.5, True, False, "3", None, float("nan"), np.bool_(True), np.float64(2)]
)
def test_submit_rejects_bad_max_tokens(engine: Engine, max_tokens: object) -> None:
    assert_rejected(engine, "max_tokens", lambda: engine.submit([1], max_tokens=max_tokens))


@pytest.mark.parametrize("eos_id", [-1, 32, 1000, True, 1.0, "1", [1]])
def test_submit_rejects_bad_eos_ids(engine: Engine, eos_id: object) -> None:
    assert_rejected(engine, "eos_id", lambda: engine.submit([1], max_tokens=2, eos_id=eos_id))


@pytest.mark.parametrize("request_id", ["", "   ", "waiting", "request-1", 5, b"id", ["x"]])
def test_submit_rejects_bad_or_duplicate_request_ids(engine: Engine, request_id: object) -> None:
    assert_rejected(
        engine, "request_id", lambda: engine.submit([1], max_tokens=2, request_id=request_id)
    )


@pytest.mark.parametrize(
    ("request_id", "match"),
    [
        ("a\x00\n", r"U\+0000"),
        ("tab\there", r"U\+0009"),
        ("bell\x07", r"U\+0007"),
        ("line\nbreak", r"U\+000A"),
        ("abc\u202edef", r"U\+202E RIGHT-TO-LEFT OVERRIDE"),
        ("zero\u200bwidth", r"U\+200B"),
        ("para\u2029graph", r"U\+2029"),
        ("line\u2028sep", r"U\+2028"),
        ("\ud800", r"U\+D800"),  # a lone surrogate: no file encoding can write it
        ("x" * 65, "65 characters; at most 64"),
        ("x" * 5000, "5000 characters"),
        ("\t\n", "non-empty"),
    ],
)
def test_submit_rejects_ids_that_would_garble_a_screen(
    engine: Engine, request_id: str, match: str
) -> None:
    with pytest.raises(ValueError) as caught:
        engine.submit([1], max_tokens=2, request_id=request_id)
    message = str(caught.value)
    assert "request_id" in message
    assert re.search(match, message), message
    assert len(message) < 200, "the id is shown cut short"
    assert_rejected(engine, match, lambda: engine.submit([1], request_id=request_id))


def test_printable_ids_of_any_script_up_to_the_bound_are_accepted(engine: Engine) -> None:
    ids = ["x" * 64, "日本語の依頼", "naïve café", "emoji 🚀", "a b", "[bold]x[/]"]
    for request_id in ids:
        assert engine.submit([1, 2], max_tokens=2, request_id=request_id) == request_id
    drain(engine)
    for request_id in ids:
        check_against_oracle(engine, request_id)


def test_submit_rejects_a_prompt_that_can_never_fit(engine: Engine) -> None:
    # 8 blocks of 4 positions: 30 prompt + 3 new positions need 9 blocks.
    assert_rejected(engine, "blocks", lambda: engine.submit([1] * 30, max_tokens=3))
    assert_rejected(engine, "blocks", lambda: engine.submit([1] * 3, max_tokens=30))


def test_rejected_submissions_do_not_disturb_later_work(engine: Engine) -> None:
    for bad in ([], [99], "x"):
        with pytest.raises(ValueError):
            engine.submit(bad, max_tokens=2)
    rid = engine.submit(np.array([1, 2, 3, 4]), max_tokens=3)  # numpy ints are token ids
    assert rid.startswith("request-")
    drain(engine)
    check_against_oracle(engine, rid)
    check_against_oracle(engine, "waiting")


@pytest.mark.parametrize("method", ["cancel", "result", "rollback", "committed_state"])
@pytest.mark.parametrize("request_id", ["nope", "", 5, None])
def test_unknown_request_ids_raise_key_error(
    engine: Engine, method: str, request_id: object
) -> None:
    assert_rejected(
        engine, "unknown request", lambda: getattr(engine, method)(request_id), KeyError
    )


def test_result_of_an_unfinished_request_says_so(engine: Engine) -> None:
    assert_rejected(engine, "not finished", lambda: engine.result("waiting"))


# -- EngineConfig ------------------------------------------------------------------------------

INT_FIELDS = [
    "max_batch_tokens",
    "max_active",
    "draft_width",
    "draft_branching",
    "max_draft_nodes",
    "block_size",
    "num_blocks",
    "keep",
    "cache_capacity",
]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [0, -3, True, 2.0, "4", None, math.inf])
def test_config_rejects_non_positive_or_non_integer_sizes(field: str, value: object) -> None:
    if field == "num_blocks" and value is None:
        assert EngineConfig(num_blocks=None).num_blocks is None  # None: sized from memory
        return
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


@pytest.mark.parametrize("value", [0, -1.5, math.inf, math.nan, "32", None, True])
def test_config_rejects_a_bad_kv_cache_memory(value: object) -> None:
    with pytest.raises(ValueError, match="kv_cache_memory_mib"):
        EngineConfig(kv_cache_memory_mib=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sizes",
    [{"num_blocks": 10**40}, {"block_size": 10**9}, {"num_blocks": 2**20, "block_size": 32}],
)
def test_config_names_a_pool_too_big_to_hold(sizes: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"block_size .* more than a pool may hold"):
        EngineConfig(**sizes)
    EngineConfig(num_blocks=2**20, block_size=16)  # 2**24 positions: the bound itself is fine


@pytest.mark.parametrize("value", [-1, True, 1.5, "2", None])
def test_config_rejects_bad_undo_depth(value: object) -> None:
    with pytest.raises(ValueError, match="undo_depth"):
        EngineConfig(undo_depth=value)  # type: ignore[arg-type]
    assert EngineConfig(undo_depth=0).undo_depth == 0  # zero = no history, allowed


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "8"])
def test_config_rejects_bad_draft_context(value: object) -> None:
    with pytest.raises(ValueError, match="draft_context"):
        EngineConfig(draft_context=value)  # type: ignore[arg-type]
    assert EngineConfig(draft_context=None).draft_context is None  # None = all positions


@pytest.mark.parametrize("field", ["state_ttl", "prefix_ttl"])
@pytest.mark.parametrize("value", [0, -1.0, math.inf, -math.inf, math.nan, True, "3", None])
def test_config_rejects_non_finite_or_non_positive_ttls(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(**{field: value})


@pytest.mark.parametrize("mode", ["fast", "", "EXACT", None, 1])
def test_config_rejects_unknown_recovery_modes(mode: object) -> None:
    with pytest.raises(ValueError, match="recovery_mode"):
        EngineConfig(recovery_mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("curve", "match"),
    [
        ([(0, 1.0)], "size"),
        ([(2, 1.0), (1, 2.0)], "increasing"),
        ([(1, 1.0), (1, 2.0)], "increasing"),
        ([(1, -1.0)], "positive"),
        ([(1, 0.0)], "positive"),
        ([(1, math.nan)], "finite"),
        ([(1, math.inf)], "finite"),
        ([(1,)], "pairs"),
        ([(1, 2.0, 3.0)], "pairs"),
        ([(True, 1.0)], "size"),
        ([(1.5, 1.0)], "size"),
        ([(1, "x")], "cost"),
        ([(1, True)], "cost"),
        ([(100, 1.0)], "max_batch_tokens"),
        ("abc", "pairs"),
    ],
)
def test_config_rejects_bad_cost_curves(curve: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EngineConfig(cost_curve=curve)  # type: ignore[arg-type]


@pytest.mark.parametrize("curve", [5, [3], [None]])
def test_config_rejects_non_iterable_cost_curves_with_value_error(curve: object) -> None:
    with pytest.raises(ValueError, match="cost_curve"):
        EngineConfig(cost_curve=curve)  # type: ignore[arg-type]


def test_config_is_frozen_and_round_trips() -> None:
    config = EngineConfig(cost_curve=((1, 1.0), (4, 2.0)), max_batch_tokens=4, state_ttl=2)
    assert config.state_ttl == 2.0
    assert EngineConfig.from_dict(config.to_dict()) == config
    with pytest.raises(AttributeError):
        config.block_size = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="bogus"):
        EngineConfig.from_dict({**config.to_dict(), "bogus": 1})


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (None, "mapping.*NoneType"),
        ([("block_size", 4)], "mapping.*list"),
        ("block_size=4", "mapping.*str"),
        ({"cost_curve": [1, 2]}, "cost_curve"),
        ({"cost_curve": 5}, "cost_curve"),
        ({"cost_curve": [[1, 2, 3]]}, "cost_curve"),
        ({1: 2, "bogus": 3}, "unknown config field.*1, bogus"),
        ({"block_size": "4"}, "block_size"),
    ],
)
def test_config_from_dict_refuses_bad_data_with_value_error(data: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_dict(data)  # type: ignore[arg-type]


def test_config_from_dict_reads_a_cost_curve_of_lists() -> None:
    config = EngineConfig.from_dict({"max_batch_tokens": 4, "cost_curve": [[1, 1], [4, 2.5]]})
    assert config.cost_curve == ((1, 1.0), (4, 2.5))


def test_bounded_recovery_must_keep_the_local_window() -> None:
    with pytest.raises(ValueError, match="keep"):
        Engine(TinyModel(window=4), config=EngineConfig(recovery_mode="mask", keep=2))
    Engine(TinyModel(window=4), config=EngineConfig(recovery_mode="mask", keep=4))


# -- Engine, models and the oracle ---------------------------------------------------------------


def test_engine_rejects_bad_construction_arguments() -> None:
    target = TinyModel()
    with pytest.raises(ValueError, match="EngineConfig"):
        Engine(target, config={"block_size": 4})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clock"):
        Engine(target, clock=5.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vocabulary"):
        Engine(target, TinyModel(vocab_size=16))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(vocab_size=0), "vocab_size"),
        (dict(width=-1), "width"),
        (dict(depth=True), "depth"),
        (dict(window=1.5), "window"),
        (dict(seed=-1), "seed"),
        (dict(seed="7"), "seed"),
    ],
)
def test_tiny_model_rejects_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TinyModel(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(depth=4), "depth"),
        (dict(depth=0), "depth"),
        (dict(noise=-0.1), "noise"),
        (dict(noise=math.nan), "noise"),
        (dict(noise=1e308), "noise 1e\\+308 is too large"),  # its logits overflow
        (dict(noise=sys.float_info.max), "too large"),  # its head itself overflows
    ],
)
def test_make_draft_rejects_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_draft(TinyModel(depth=3), **kwargs)


def test_oracle_rejects_bad_input() -> None:
    model = TinyModel()
    with pytest.raises(ValueError, match="empty"):
        greedy_generate(model, [], max_tokens=2)
    with pytest.raises(ValueError, match="max_tokens"):
        greedy_generate(model, [1], max_tokens=-1)
    with pytest.raises(ValueError, match="vocabulary"):
        greedy_generate(model, [40], max_tokens=1)


@pytest.mark.parametrize("eos_id", [-1, 32, 99, True, 1.0, "1"])
def test_oracle_and_engine_refuse_the_same_eos_ids(eos_id: object) -> None:
    model = TinyModel()  # vocabulary 32
    engine = Engine(model, clock=ManualClock())
    with pytest.raises(ValueError, match="eos_id") as oracle_error:
        greedy_generate(model, [1], max_tokens=2, eos_id=eos_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eos_id") as engine_error:
        engine.submit([1], max_tokens=2, eos_id=eos_id)  # type: ignore[arg-type]
    assert str(oracle_error.value) == str(engine_error.value)


def test_a_huge_but_finite_draft_noise_is_only_a_poor_draft() -> None:
    target = TinyModel(seed=5)
    engine = Engine(target, make_draft(target, noise=1e300, seed=6), clock=ManualClock())
    rid = engine.submit([1, 2, 3], max_tokens=6)
    drain(engine)
    assert check_against_oracle(engine, rid).finish_reason == "length"


def test_state_comparison_refuses_different_sequences() -> None:
    model = TinyModel()
    left = greedy_generate(model, [1, 2], max_tokens=1).state
    right = greedy_generate(model, [1, 3], max_tokens=1).state
    with pytest.raises(ValueError, match="different token"):
        left.max_error(right)


def test_generated_ids_never_collide_with_chosen_ones() -> None:
    engine = Engine(TinyModel(), clock=ManualClock())
    engine.submit([1], max_tokens=1, request_id="request-2")
    generated = [engine.submit([1], max_tokens=1) for _ in range(3)]
    assert "request-2" not in generated and len(set(generated)) == 3


def test_a_pool_larger_than_the_machine_is_refused_before_it_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stores are written through when made: on a system that overcommits memory, a pool
    too big for it would get the process killed rather than raise."""
    import engine.model as model_module

    model = TinyModel(vocab_size=32, width=8, depth=1, window=4, seed=1)
    config = EngineConfig(num_blocks=64, block_size=16)
    needed = 8 * 64 * 16 * model.layout.size
    monkeypatch.setattr(model_module, "physical_memory", lambda: needed - 1)
    with pytest.raises(ValueError, match=r"a pool of 1024 positions needs .* lower num_blocks"):
        Engine(model, config=config)
    monkeypatch.setattr(model_module, "physical_memory", lambda: needed)
    Engine(model, config=config)  # exactly fits
    monkeypatch.setattr(model_module, "physical_memory", lambda: None)  # the system does not say
    Engine(model, config=config)


# -- NumPy integers, wrong objects, a clock that is not a clock ----------------------------------


def test_numpy_integers_count_as_integers_everywhere_and_are_stored_as_ints() -> None:
    """Sizes and ids often come out of arrays: each integer argument takes a NumPy integer
    (never a bool) and keeps a plain int, so configs still serialise to JSON."""
    i = np.int64
    config = EngineConfig(
        block_size=i(4), num_blocks=i(32), max_batch_tokens=i(8), undo_depth=i(3),
        draft_context=i(16),
    )  # fmt: skip
    stored = config.to_dict()
    for name in ("block_size", "num_blocks", "max_batch_tokens", "undo_depth", "draft_context"):
        assert type(stored[name]) is int
    json.dumps(config.to_dict())
    target = TinyModel(vocab_size=i(32), width=i(16), depth=i(2), window=i(4), seed=i(3))
    plain = Engine(target, make_draft(target, seed=4), config=EngineConfig(block_size=4,
                   num_blocks=32, max_batch_tokens=8, undo_depth=3, draft_context=16),
                   clock=ManualClock())  # fmt: skip
    numpy = Engine(target, make_draft(target, seed=i(4)), config=config, clock=ManualClock())
    prompt = np.array([5, 6, 7], dtype=np.int32)
    floats = EngineConfig(
        state_ttl=np.int64(3), prefix_ttl=np.float32(2), cost_curve=[(i(1), np.float32(1))]
    )
    assert floats.to_dict()["cost_curve"] == [[1, 1.0]] and type(floats.state_ttl) is float
    json.dumps(floats.to_dict())
    assert make_draft(target, noise=np.float32(0.1)).weights.head.dtype == np.float64
    for engine, n in ((plain, int), (numpy, i)):
        rid = engine.submit(prompt, max_tokens=n(6), eos_id=n(31))
        engine.run(max_steps=n(2))
        engine.rollback(rid, n(1))
        drain(engine)
        assert engine.requests[rid].max_tokens == 6 and type(engine.requests[rid].max_tokens) is int
    assert numpy.snapshot()["requests"] == plain.snapshot()["requests"]
    named = numpy.submit([1], max_tokens=1, request_id=np.str_("from-an-array"))
    assert type(named) is str and type(numpy.requests[named].request_id) is str
    oracle = greedy_generate(target, prompt, max_tokens=i(6), eos_id=i(31))
    assert numpy.result(rid).tokens == oracle.tokens


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_draft(None), "target must be a TinyModel, got NoneType"),  # type: ignore[arg-type]
        (lambda: greedy_generate(None, [1]), "model must be a TinyModel, got NoneType"),  # type: ignore[arg-type]
        (
            lambda: greedy_generate(TinyModel(), [1], max_tokens=1).state.max_error(None),  # type: ignore[arg-type]
            "other must be a State, got NoneType",
        ),
    ],
)
def test_a_wrong_object_is_named_not_an_attribute_error(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("reading", [Fraction(1, 2), Decimal("1.5"), np.array(2.0), np.float32(3)])
def test_a_clock_may_return_any_real_number(reading: object) -> None:
    engine = Engine(TinyModel(), clock=lambda: reading)
    assert engine.now() == float(reading)  # type: ignore[arg-type]
    rid = engine.submit([1, 2], max_tokens=2)
    drain(engine)
    check_against_oracle(engine, rid)


@pytest.mark.parametrize(
    ("reading", "match"),
    [
        (math.nan, "non-finite"),
        (math.inf, "non-finite"),
        *((r, "clock must return a number of seconds, got") for r in ["x", "1", None, True]),
        (np.array([1.0, 2.0]), "clock must return a number of seconds, got"),
        ([1.0], "clock must return a number of seconds, got"),
    ],
)
def test_a_bad_clock_reading_aborts_the_round_cleanly_and_says_so(
    reading: object, match: str
) -> None:
    clock = ManualClock()
    target = TinyModel(seed=4)
    engine = Engine(target, make_draft(target), clock=clock)
    rid = engine.submit([1, 2, 3], max_tokens=4)
    engine.step()
    before = engine.snapshot()
    clock.now = reading  # type: ignore[assignment]
    with pytest.raises(ValueError, match=match):
        engine.step()
    clock.now = 1.0
    assert engine.snapshot()["requests"] == before["requests"]
    assert engine.snapshot()["tick"] == before["tick"]
    drain(engine)
    check_against_oracle(engine, rid)


@pytest.mark.parametrize(
    ("sizes", "named"),
    [
        (dict(depth=10**30), "depth 1000000000000000000000000000000"),
        (dict(depth=10**8), "depth 100000000"),
        (dict(width=200_000), "width 200000"),
        (dict(vocab_size=10**12), "vocab_size 1000000000000"),
    ],
)
def test_a_model_larger_than_the_machine_is_refused_before_it_is_made(
    monkeypatch: pytest.MonkeyPatch, sizes: dict[str, int], named: str
) -> None:
    """The weights are made array by array: on a system that overcommits memory, a model too
    big for it would grow until the process is killed."""
    import engine.model as model

    monkeypatch.setattr(model, "physical_memory", lambda: 16 * 2**30)
    with pytest.raises(ValueError, match=rf"{named}.* GiB for its weights, more than"):
        TinyModel(**sizes)
    monkeypatch.setattr(model, "physical_memory", lambda: 2**20)  # 1 MiB: even 32 x 64 x 3
    with pytest.raises(ValueError, match="GiB for its weights"):
        TinyModel(vocab_size=64, width=64, depth=3)
    monkeypatch.setattr(model, "physical_memory", lambda: None)  # the system does not say
    TinyModel(vocab_size=64, width=64, depth=3)


def test_generate_leaves_other_requests_results_to_run() -> None:
    """run() delivers each finished request once: generate() takes only its own."""
    engine = Engine(TinyModel(), clock=ManualClock())
    first = engine.submit([1, 2, 3], max_tokens=3)
    result = engine.generate([4, 5], max_tokens=2)
    assert result.tokens == greedy_generate(engine.target, [4, 5], max_tokens=2).tokens
    assert [r.request_id for r in engine.run()] == [first]
    assert engine.run() == []  # each delivered once, generate's own included


def poison_prefill(model: TinyModel, prompt: list[int]) -> None:
    """Make every forward of `model` that computes `prompt`'s prefill fail."""
    original = model.forward_rows

    def failing(items: list[Any], context: Any = None, **options: Any) -> Any:
        if any(list(item.tokens[: len(prompt)]) == prompt for item in items):
            raise RuntimeError(f"prompt {prompt} is poisoned")
        return original(items, context, **options)

    model.forward_rows = failing  # type: ignore[method-assign]


def test_generate_raises_for_its_own_failure_not_for_another_requests() -> None:
    engine = Engine(TinyModel(seed=2), clock=ManualClock())
    poison_prefill(engine.target, [30, 30, 30])
    doomed = engine.submit([30, 30, 30], max_tokens=6)
    result = engine.generate([4, 5], max_tokens=2)  # shares its first round with the failure
    assert result.finish_reason == "length"
    with pytest.raises(RequestError, match=r"prompt \[30, 30, 30\] is poisoned") as raised:
        engine.generate([30, 30, 30, 1], max_tokens=2)
    (own,) = raised.value.results
    (failed,) = engine.run(raise_on_error=False)  # the first failure only: own was delivered
    assert failed.request_id == doomed and failed.finish_reason == "error"
    assert own.request_id not in (doomed, result.request_id)
