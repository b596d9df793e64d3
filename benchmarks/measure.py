"""Drive an engine to completion and record what every round cost (time, tokens, memory).

Both engines under test (ours and the reference) return a list of event dicts from `step()`,
with a `commit` event per request per round (carrying the committed `tokens` and the number of
`accepted` draft tokens) and a `finished` event when a request ends. Measuring through those
events, rather than through either engine's internals, keeps the comparison about the same work.
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Event = dict[str, Any]

_PROC_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass
class StepRecord:
    """One `step()` call."""

    seconds: float
    committed: int  # tokens committed this round, all requests together
    accepted: int  # draft tokens the target accepted
    verified: int  # draft tokens the target checked
    transient_bytes: int | None = None  # traced peak during the step minus memory before it
    traced_bytes: int | None = None  # traced memory after the step (above the run's baseline)


@dataclass
class RunRecord:
    """A whole drive: every step, and what happened to the run as a whole."""

    steps: list[StepRecord] = field(default_factory=list)
    finished: int = 0
    submitted: int = 0
    truncated: str | None = None  # why the run stopped early, if it did
    rss_peak_delta_bytes: int | None = None
    traced_peak_bytes: int | None = None

    @property
    def committed(self) -> int:
        return sum(s.committed for s in self.steps)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (no interpolation: a reported p95 is a latency that happened)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise_steps(steps: Sequence[StepRecord]) -> dict[str, Any]:
    """Throughput and latency of a run of steps (the figures every workload reports)."""
    seconds = sum(s.seconds for s in steps)
    committed = sum(s.committed for s in steps)
    verified = sum(s.verified for s in steps)
    accepted = sum(s.accepted for s in steps)
    latencies = [s.seconds for s in steps]
    return {
        "seconds": seconds,
        "rounds": len(steps),
        "committed_tokens": committed,
        "tokens_per_second": committed / seconds if seconds > 0 else None,
        "rounds_per_second": len(steps) / seconds if seconds > 0 else None,
        "step_mean_ms": milliseconds(mean(latencies)),
        "step_p95_ms": milliseconds(percentile(latencies, 0.95)),
        "step_max_ms": milliseconds(max(latencies) if latencies else None),
        "tokens_per_round": committed / len(steps) if steps else None,
        "draft_tokens_verified": verified,
        "draft_tokens_accepted": accepted,
        "acceptance_rate": accepted / verified if verified else None,
    }


def milliseconds(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


# -- resident memory -------------------------------------------------------------------------


def _status_kib(name: str) -> int | None:
    try:
        for line in _PROC_STATUS.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_rss_peak() -> int | None:
    """Reset the kernel's peak-RSS mark (VmHWM) to now; returns the current RSS in bytes.

    Writing "5" to clear_refs is Linux's documented way to restart peak-RSS accounting, so each
    workload's RSS peak is its own and not the largest seen earlier in the process.
    """
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return None
    rss = _status_kib("VmRSS")
    return None if rss is None else rss * 1024


def rss_peak_bytes() -> int | None:
    peak = _status_kib("VmHWM")
    return None if peak is None else peak * 1024


# -- the drive loop --------------------------------------------------------------------------


def drive(
    make_engine: Callable[[], Any],
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    *,
    verified_key: str,
    time_limit: float,
    trace_memory: bool = False,
    max_steps: int = 100_000,
    on_step: Callable[[int, StepRecord], None] | None = None,
) -> tuple[RunRecord, Any]:
    """Submit every prompt, then step until all requests finished (or a limit is hit).

    `trace_memory` runs under tracemalloc, recording each step's transient peak (a whole-history
    copy per step shows up there) and the memory held after it. Its timings are not reported:
    tracing slows Python code down several times. The engine is built inside the measured
    region, so its preallocated pool counts towards peak memory. Returns the record and engine.
    """
    record = RunRecord(submitted=len(prompts))
    gc.collect()
    if trace_memory:
        tracemalloc.start()
        baseline, _ = tracemalloc.get_traced_memory()
        overall_peak = 0
    else:
        rss_before = reset_rss_peak()
    engine = make_engine()
    for prompt in prompts:
        engine.submit(list(prompt), max_tokens=max_tokens)
    # Objects alive before the rounds (the harness's own, earlier runs' results, the other
    # engine's module, and this engine as built and submitted to) are frozen out of garbage
    # collection meanwhile: a full collection in a timed round then walks what the rounds
    # allocate, not whatever else the process holds (which made one run differ by 5-10% with
    # the order of the workloads before it).
    gc.freeze()
    started = time.perf_counter()
    try:
        while record.finished < record.submitted:
            if len(record.steps) >= max_steps:
                record.truncated = f"stopped after {max_steps} rounds"
                break
            if trace_memory:
                before, _ = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
            t0 = time.perf_counter()
            events = engine.step()
            seconds = time.perf_counter() - t0
            step = _step_record(events, seconds, verified_key)
            if trace_memory:
                after, peak = tracemalloc.get_traced_memory()
                step.transient_bytes = peak - before
                step.traced_bytes = after - baseline
                overall_peak = max(overall_peak, peak - baseline)
            record.steps.append(step)
            record.finished += sum(1 for e in events if e.get("kind") == "finished")
            if on_step is not None:
                on_step(len(record.steps) - 1, step)
            if not events:
                record.truncated = "the engine did nothing in a round (stuck?)"
                break
            if time.perf_counter() - started > time_limit and record.finished < record.submitted:
                record.truncated = (
                    f"time limit {time_limit:g}s reached after {record.committed} tokens"
                )
                break
    finally:
        gc.unfreeze()
        if trace_memory:
            record.traced_peak_bytes = overall_peak
            tracemalloc.stop()
        else:
            peak = rss_peak_bytes()
            if rss_before is not None and peak is not None:
                record.rss_peak_delta_bytes = max(0, peak - rss_before)
    return record, engine


def _step_record(events: list[Event], seconds: float, verified_key: str) -> StepRecord:
    commits = [e for e in events if e.get("kind") == "commit"]
    return StepRecord(
        seconds=seconds,
        committed=sum(len(e.get("tokens", ())) for e in commits),
        accepted=sum(int(e.get("accepted", 0)) for e in commits),
        verified=sum(int(e.get(verified_key, 0)) for e in commits),
    )
