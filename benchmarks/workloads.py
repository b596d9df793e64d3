"""The named workloads: their shapes (full and --quick) and how each is run on an engine.

* `batch`        - many requests decoding together, speculative (the default draft).
* `batch-greedy` - the same without a draft.
* `long`         - one request at a time with a long prompt: prefill time, then decode time
                   per committed token, greedy and speculative, at several context lengths.
* `tui`          - keypress-to-refresh latency of the debugger (see tui_latency.py).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any

from engines import EngineSpec, EngineUnderTest
from measure import RunRecord, drive, summarise_steps

WORKLOAD_NAMES = ("batch", "batch-greedy", "long", "tui", "tui-prefixes")
TUI_WORKLOADS = ("tui", "tui-prefixes")
# What a run without --workload measures: tui-prefixes (a minute of long prefills) on request.
DEFAULT_WORKLOADS = tuple(name for name in WORKLOAD_NAMES if name != "tui-prefixes")
VOCAB = 64


@dataclass(frozen=True)
class BatchShape:
    requests: int
    prompt_tokens: int
    new_tokens: int
    speculative: bool


@dataclass(frozen=True)
class LongShape:
    lengths: tuple[int, ...]
    new_tokens: int
    block_size: int = 64


@dataclass(frozen=True)
class TuiShape:
    requests: int
    prompt_tokens: int
    new_tokens: int
    presses: int
    prefixes: int = 0  # > 0: issue 26's scenario (prompts on shared prefixes, see tui_latency)


@dataclass(frozen=True)
class Tuning:
    """Command-line overrides of the speculation and history settings (defaults: engine's)."""

    draft_width: int = 2
    draft_branching: int = 1
    max_draft_nodes: int = 2
    undo_depth: int | None = None
    # One long request verifies deeper chains profitably (the batch shapes share a round's
    # budget between 16 requests): `long` drafts this deep, as a chain.
    long_draft_width: int = 4
    # A long request's draft attends to only the most recent stored positions (a windowed
    # draft, as long-context self-speculation does): proposals get cheaper at long context,
    # verification stays exact. None: the whole history.
    long_draft_context: int | None = 256


def shapes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "batch": BatchShape(requests=16, prompt_tokens=64, new_tokens=16, speculative=True),
            "batch-greedy": BatchShape(
                requests=16, prompt_tokens=64, new_tokens=16, speculative=False
            ),
            "long": LongShape(lengths=(256, 1024), new_tokens=8),
            "tui": TuiShape(requests=64, prompt_tokens=16, new_tokens=64, presses=10),
            "tui-prefixes": TuiShape(
                requests=48, prompt_tokens=0, new_tokens=16, presses=10, prefixes=4
            ),
        }
    return {
        "batch": BatchShape(requests=16, prompt_tokens=64, new_tokens=64, speculative=True),
        "batch-greedy": BatchShape(requests=16, prompt_tokens=64, new_tokens=64, speculative=False),
        "long": LongShape(lengths=(256, 1024, 2048, 4096), new_tokens=32),
        "tui": TuiShape(requests=64, prompt_tokens=16, new_tokens=256, presses=50),
        "tui-prefixes": TuiShape(
            requests=48, prompt_tokens=0, new_tokens=16, presses=40, prefixes=4
        ),
    }


def random_prompts(count: int, length: int, seed: int) -> list[list[int]]:
    """Deterministic random prompts (different seeds per workload: no accidental cache hits)."""
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(count)]


def shape_dict(shape: Any) -> dict[str, Any]:
    data = asdict(shape)
    if "lengths" in data:
        data["lengths"] = list(data["lengths"])
    return data


# -- batch ------------------------------------------------------------------------------------


def batch_spec(shape: BatchShape, tuning: Tuning) -> EngineSpec:
    # Every request is admitted every round; 64 verified positions per round gives each of the
    # 16 requests its main position plus 3 draft tokens. The pool holds every request's whole
    # sequence (plus speculative rows and what the prefix cache and undo history retain).
    positions = shape.prompt_tokens + shape.new_tokens + tuning.draft_width + 1
    per_request = -(-positions // 16)
    return EngineSpec(
        speculative=shape.speculative,
        max_active=shape.requests,
        max_batch_tokens=max(64, shape.requests),
        block_size=16,
        num_blocks=max(512, 3 * per_request * shape.requests),
        draft_width=tuning.draft_width,
        draft_branching=tuning.draft_branching,
        max_draft_nodes=tuning.max_draft_nodes,
        undo_depth=tuning.undo_depth,
    )


def run_batch(
    adapter: EngineUnderTest, shape: BatchShape, tuning: Tuning, *, time_limit: float
) -> dict[str, Any]:
    """One engine's timed run of a batch shape (the profiler's)."""
    return run_batch_in_turns([adapter], shape, tuning, time_limit=time_limit)[adapter.name]


def batch_memory(
    adapter: EngineUnderTest, shape: BatchShape, tuning: Tuning, *, time_limit: float
) -> dict[str, Any]:
    """One run under tracemalloc: peak memory and bytes allocated within each round."""
    spec = batch_spec(shape, tuning)
    prompts = random_prompts(shape.requests, shape.prompt_tokens, seed=1)
    record, _ = _drive(adapter, spec, prompts, shape.new_tokens, time_limit, trace_memory=True)
    return _memory_summary(record)


def run_batch_in_turns(
    adapters: Sequence[EngineUnderTest],
    shape: BatchShape,
    tuning: Tuning,
    *,
    time_limit: float,
    repeat: int = 1,
    min_turn_seconds: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Every engine's runs of one batch shape, taken in turns (ours, theirs, ours, ...), so a
    slow minute on a shared machine falls on both engines' runs instead of on one engine's.
    Within a turn an engine runs again until its runs add up to `min_turn_seconds` (see
    `_turn`)."""
    spec = batch_spec(shape, tuning)
    prompts = random_prompts(shape.requests, shape.prompt_tokens, seed=1)
    # Each run keeps its record and counters, not its engine: engines held on to would grow
    # the heap that later runs allocate and collect garbage in.
    runs: dict[str, list[tuple[RunRecord, Any]]] = {adapter.name: [] for adapter in adapters}
    for _ in range(max(1, repeat)):
        for adapter in adapters:
            for _ in _turn(min_turn_seconds):
                record, engine = _drive(adapter, spec, prompts, shape.new_tokens, time_limit)
                runs[adapter.name].append((record, adapter.counters(engine)))
                del engine
    return {adapter.name: _batch_summary(adapter, spec, runs[adapter.name]) for adapter in adapters}


def _batch_summary(
    adapter: EngineUnderTest, spec: EngineSpec, runs: list[tuple[RunRecord, dict[str, Any]]]
) -> dict[str, Any]:
    # The median run by throughput: one slow outlier (another process on a 2-core machine)
    # neither wins nor loses the comparison.
    ranked = sorted(runs, key=lambda pair: summarise_steps(pair[0].steps)["tokens_per_second"] or 0)
    record, counters = ranked[len(ranked) // 2]
    result = _run_summary(record)
    result["counters"] = counters
    result["engine"] = adapter.describe(spec)
    if len(runs) > 1:
        result["repeats"] = [summarise_steps(r.steps)["tokens_per_second"] for r, _ in runs]
    return result


def _run_summary(record: RunRecord) -> dict[str, Any]:
    summary = summarise_steps(record.steps)
    summary.update(
        {
            "requests_finished": record.finished,
            "requests_submitted": record.submitted,
            "truncated": record.truncated,
            "rss_peak_delta_bytes": record.rss_peak_delta_bytes,
        }
    )
    return summary


def _memory_summary(record: RunRecord) -> dict[str, Any]:
    """Memory figures; the first round (which prefills every prompt) is kept apart."""
    steps = record.steps
    later = [s.transient_bytes or 0 for s in steps[1:]]
    return {
        "traced_peak_bytes": record.traced_peak_bytes,
        "traced_final_bytes": steps[-1].traced_bytes if steps else None,
        "committed_tokens": record.committed,
        "prefill_transient_bytes": steps[0].transient_bytes if steps else None,
        "later_max_transient_bytes": max(later) if later else None,
        "later_median_transient_bytes": statistics.median(later) if later else None,
        "truncated": record.truncated,
    }


# -- long context -----------------------------------------------------------------------------


LONG_MODES = ("greedy", "speculative")


def long_spec(length: int, shape: LongShape, speculative: bool, tuning: Tuning) -> EngineSpec:
    positions = length + shape.new_tokens + tuning.long_draft_width + 1
    blocks = -(-positions // shape.block_size)
    return EngineSpec(
        speculative=speculative,
        max_active=1,
        max_batch_tokens=64,
        block_size=shape.block_size,
        # Room for the sequence twice over: undo history and the prefix cache keep blocks.
        num_blocks=2 * blocks + 8,
        draft_width=tuning.long_draft_width,
        draft_branching=1,
        max_draft_nodes=tuning.long_draft_width,
        undo_depth=tuning.undo_depth,
        draft_context=tuning.long_draft_context,
    )


def long_memory(
    adapter: EngineUnderTest, shape: LongShape, tuning: Tuning, *, time_limit: float
) -> dict[str, Any]:
    """Per mode and context length, one run under tracemalloc (see `_long_memory`)."""
    results: dict[str, Any] = {}
    for mode in LONG_MODES:
        per_length: dict[str, Any] = {}
        for length in shape.lengths:
            spec = long_spec(length, shape, mode != "greedy", tuning)
            prompt = random_prompts(1, length, seed=1000 + length)
            record, _ = _drive(
                adapter, spec, prompt, shape.new_tokens, time_limit, trace_memory=True
            )
            per_length[str(length)] = _long_memory(record)
        results[mode] = per_length
    return results


def run_long_in_turns(
    adapters: Sequence[EngineUnderTest],
    shape: LongShape,
    tuning: Tuning,
    *,
    time_limit: float,
    repeat: int = 1,
    new_tokens_at: dict[str, dict[int, int]] | None = None,
    min_turn_seconds: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """Per mode and context length: prefill (the first round) and decode after it, each
    engine's runs taken in turns (like `run_batch_in_turns`). `new_tokens_at[engine name]`
    lowers that engine's new tokens at given lengths (for a slow engine); the result records
    the count actually used."""
    results: dict[str, dict[str, Any]] = {adapter.name: {} for adapter in adapters}
    for mode in LONG_MODES:
        for length in shape.lengths:
            prompt = random_prompts(1, length, seed=1000 + length)
            plans = {}
            for adapter in adapters:
                fewer = (new_tokens_at or {}).get(adapter.name, {})
                new_tokens = fewer.get(length, shape.new_tokens)
                sized = replace(shape, new_tokens=new_tokens)
                plans[adapter.name] = (
                    new_tokens,
                    long_spec(length, sized, mode != "greedy", tuning),
                )
            runs: dict[str, list[RunRecord]] = {adapter.name: [] for adapter in adapters}
            counters: dict[str, Any] = {}
            for _ in range(max(1, repeat)):
                for adapter in adapters:
                    new_tokens, spec = plans[adapter.name]
                    for _ in _turn(min_turn_seconds):
                        record, engine = _drive(adapter, spec, prompt, new_tokens, time_limit)
                        runs[adapter.name].append(record)
                        counters[adapter.name] = adapter.counters(engine)
                        del engine
            for adapter in adapters:
                summary = _long_summary(runs[adapter.name], plans[adapter.name][0])
                summary["counters"] = counters[adapter.name]
                results[adapter.name].setdefault(mode, {})[str(length)] = summary
    return results


def _long_summary(runs: list[RunRecord], new_tokens: int) -> dict[str, Any]:
    figures = [_long_figures(record) for record in runs]
    # Element-wise medians across repeats; one repeat is just its own figures.
    summary = dict(figures[len(figures) // 2])
    for key in ("prefill_seconds", "decode_ms_per_token"):
        values = [f[key] for f in figures if f[key] is not None]
        summary[key] = statistics.median(values) if values else None
    summary["new_tokens"] = new_tokens
    if len(runs) > 1:
        summary["repeats"] = [
            {key: f[key] for key in ("prefill_seconds", "decode_ms_per_token")} for f in figures
        ]
    return summary


def _long_figures(record: RunRecord) -> dict[str, Any]:
    if not record.steps:
        return {"prefill_seconds": None, "decode_ms_per_token": None, "truncated": record.truncated}
    prefill, decode = record.steps[0], record.steps[1:]
    decode_summary = summarise_steps(decode)
    committed = decode_summary["committed_tokens"]
    return {
        "prefill_seconds": prefill.seconds,
        "prefill_committed_tokens": prefill.committed,
        "decode_ms_per_token": (
            decode_summary["seconds"] / committed * 1000.0 if committed else None
        ),
        "decode": decode_summary,
        "truncated": record.truncated,
        "rss_peak_delta_bytes": record.rss_peak_delta_bytes,
    }


def _long_memory(record: RunRecord) -> dict[str, Any]:
    """Memory figures; the finishing round is kept apart from the decode rounds.

    Finishing a request legitimately copies its committed rows out of the pool once (so it can
    still be inspected); a per-step whole-history copy would show in every decode round.
    """
    steps = record.steps
    decode, finish = steps[1:-1], steps[-1:] if len(steps) > 1 else []
    transients = [s.transient_bytes or 0 for s in decode]
    return {
        "traced_peak_bytes": record.traced_peak_bytes,
        "prefill_transient_bytes": steps[0].transient_bytes if steps else None,
        "decode_max_transient_bytes": max(transients) if transients else None,
        "decode_median_transient_bytes": statistics.median(transients) if transients else None,
        "finish_step_transient_bytes": finish[0].transient_bytes if finish else None,
        "traced_final_bytes": steps[-1].traced_bytes if steps else None,
        "committed_tokens": record.committed,
        "truncated": record.truncated,
    }


def warm_up(adapter: EngineUnderTest, tuning: Tuning) -> None:
    """A few small runs first, so one-time costs are not timed: first calls, and the BLAS
    thread pool, which starts on the first matrix product large enough to be split."""
    for speculative in (True, False):
        shape = BatchShape(requests=4, prompt_tokens=24, new_tokens=8, speculative=speculative)
        _drive(adapter, batch_spec(shape, tuning), random_prompts(4, 24, seed=99), 8, 30.0)
        long_shape = LongShape(lengths=(512,), new_tokens=4)
        long = long_spec(512, long_shape, speculative, tuning)
        _drive(adapter, long, random_prompts(1, 512, seed=98), 4, 30.0)


# At most this many runs of one engine in one turn (see `_turn`).
MAX_RUNS_PER_TURN = 10


def _turn(min_seconds: float) -> Iterator[int]:
    """Run numbers of one engine's turn: at least one run, more while the turn has lasted less
    than `min_seconds` (up to MAX_RUNS_PER_TURN). A run of ours can last 20 ms where the
    reference's lasts seconds: one hiccup of a shared machine then moves a single short run by
    several percent, while the median of several runs stays put."""
    start = time.perf_counter()
    for run in range(MAX_RUNS_PER_TURN):
        if run and time.perf_counter() - start >= min_seconds:
            return
        yield run


def _drive(
    adapter: EngineUnderTest,
    spec: EngineSpec,
    prompts: list[list[int]],
    new_tokens: int,
    time_limit: float,
    *,
    trace_memory: bool = False,
) -> tuple[RunRecord, Any]:
    """measure.drive() on a fresh engine the adapter builds for `spec`."""
    return drive(
        partial(adapter.build, spec),
        prompts,
        new_tokens,
        verified_key=adapter.verified_key,
        time_limit=time_limit,
        trace_memory=trace_memory,
    )
