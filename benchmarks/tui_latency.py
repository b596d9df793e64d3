"""The `tui` workload: keypress-to-refresh latency of the debugger with 64 active requests.

The app runs headless under Textual's Pilot. Each measured press of space (one engine round)
is timed from the key press until the session's engine has advanced a round *and* Textual has
processed everything that round queued (repaints included), i.e. until the screen shows it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engines import DRAFT_SEED, MODEL_SHAPE, TARGET_SEED
from measure import mean, percentile
from workloads import TuiShape, random_prompts

WARM_UP_PRESSES = 2
SCREEN_SIZE = (160, 50)
ROUND_TIMEOUT = 30.0  # seconds one press may take before the workload gives up


def tui_scenario_document(shape: TuiShape) -> dict[str, Any]:
    positions = shape.prompt_tokens + shape.new_tokens + 8
    blocks_per_request = -(-positions // 16)
    prompts = random_prompts(shape.requests, shape.prompt_tokens, seed=7)
    return {
        "schema": 1,
        "name": "benchmark-tui",
        "description": f"{shape.requests} requests active at once (benchmark harness)",
        "seed": TARGET_SEED,
        "model": dict(MODEL_SHAPE),
        "draft": {"depth": 1, "noise": 0.1, "seed": DRAFT_SEED},
        "config": {
            # All requests are admitted every round: the debugger shows 64 running requests.
            "max_active": shape.requests,
            "max_batch_tokens": 2 * shape.requests,
            "block_size": 16,
            "num_blocks": blocks_per_request * shape.requests + 64,
        },
        "events": [
            {
                "tick": 0,
                "submit": {
                    "id": f"request-{i + 1}",
                    "prompt": prompt,
                    "max_tokens": shape.new_tokens,
                },
            }
            for i, prompt in enumerate(prompts)
        ],
    }


def run_tui(shape: TuiShape) -> dict[str, Any]:
    """Measure; returns {"error": ...} instead when the app cannot be imported or run."""
    try:
        from deepinfer_tui.app import DebuggerApp

        from deepinfer_tui.scenario import parse_scenario
        from deepinfer_tui.session import Session
    except ImportError as error:
        return {"error": f"the debugger app is not available: {error}"}
    scenario = parse_scenario(tui_scenario_document(shape), "benchmark tui scenario")
    session = Session(scenario)
    try:
        latencies, rounds = asyncio.run(_press_and_time(DebuggerApp(session), session, shape))
    except Exception as error:  # report, never crash the whole harness run
        return {"error": f"{type(error).__name__}: {error}"}
    snapshot = session.engine.metrics()
    return {
        "presses": len(latencies),
        "warm_up_presses": WARM_UP_PRESSES,
        "rounds_advanced": rounds,
        "latency_mean_ms": _ms(mean(latencies)),
        "latency_p50_ms": _ms(percentile(latencies, 0.50)),
        "latency_p95_ms": _ms(percentile(latencies, 0.95)),
        "latency_max_ms": _ms(max(latencies) if latencies else None),
        "running_requests_at_end": snapshot["requests"]["running"] + snapshot["requests"]["queued"],
        "screen_size": list(SCREEN_SIZE),
    }


async def _press_and_time(app: Any, session: Any, shape: TuiShape) -> tuple[list[float], int]:
    latencies: list[float] = []
    rounds = 0
    async with app.run_test(size=SCREEN_SIZE) as pilot:
        await pilot.pause()
        for press in range(WARM_UP_PRESSES + shape.presses):
            tick = session.engine.tick
            started = time.perf_counter()
            await pilot.press("space")
            # The app may step in a worker: wait for the round, then for the repaint it causes.
            while session.engine.tick == tick:
                if time.perf_counter() - started > ROUND_TIMEOUT:
                    raise TimeoutError(f"press {press + 1} did not step the engine")
                await pilot.pause(0.001)
            await pilot.pause()
            elapsed = time.perf_counter() - started
            rounds += 1
            if press >= WARM_UP_PRESSES:
                latencies.append(elapsed)
    return latencies, rounds


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0
