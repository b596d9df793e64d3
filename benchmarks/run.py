"""Benchmark harness: `python benchmarks/run.py [--workload NAME ...] [--quick] [--json OUT]`.

Runs the named workloads on this repository's engine and, when `core-deepinfer` is importable
(and --no-reference is not given), on the reference in the same process, interleaved workload by
workload so both see the same machine load. Prints tables, the ratios and the issue's targets
(reported, never asserted), and writes everything as JSON (default: benchmarks/results/latest.json).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:  # also runnable as `python -m` from elsewhere
    sys.path.insert(0, str(BENCHMARKS))

import reference  # noqa: E402
from engines import MODEL_SHAPE, OurEngine  # noqa: E402
from environment import environment  # noqa: E402
from floor import decode_floor  # noqa: E402
from report import batch_ratios, evaluate_targets, long_ratios, render  # noqa: E402
from tui_latency import run_tui_repeated  # noqa: E402
from workloads import (  # noqa: E402
    DEFAULT_WORKLOADS,
    MAX_RUNS_PER_TURN,
    TUI_WORKLOADS,
    WORKLOAD_NAMES,
    Tuning,
    batch_memory,
    long_memory,
    run_batch_in_turns,
    run_long_in_turns,
    shape_dict,
    shapes,
    warm_up,
)

DEFAULT_OUTPUT = BENCHMARKS / "results" / "latest.json"
SCHEMA = 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="Measure the engine (and the reference, when installed) on named workloads.",
    )
    parser.add_argument(
        "--workload",
        action="append",
        choices=WORKLOAD_NAMES,
        metavar="NAME",
        help=f"run only this workload (repeatable): {', '.join(WORKLOAD_NAMES)}",
    )
    parser.add_argument("--quick", action="store_true", help="fewer and shorter workloads")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_OUTPUT, metavar="OUT", help="where to write JSON"
    )
    parser.add_argument(
        "--no-reference", action="store_true", help="do not run core-deepinfer even if installed"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc memory pass")
    parser.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        help="turns per workload (each engine runs in each turn); the median run is reported "
        "(default 1)",
    )
    parser.add_argument(
        "--min-turn-seconds",
        type=float,
        default=None,
        metavar="SECONDS",
        help="within each repeat, run an engine again until its runs last this long (at most "
        f"{MAX_RUNS_PER_TURN} runs; default 0.5, quick 0): short runs are noisy",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop one engine's run of one workload after this long (default 180, quick 30)",
    )
    parser.add_argument(
        "--reference-tokens-at-4096",
        type=_positive_int,
        default=None,
        metavar="N",
        help="new tokens for the reference's long run at 4096 context (default: same as ours)",
    )
    parser.add_argument("--draft-width", type=_positive_int, default=2)
    parser.add_argument("--branching", type=_positive_int, default=1, help="our draft branching")
    parser.add_argument("--max-draft-nodes", type=_positive_int, default=2)
    parser.add_argument(
        "--long-draft-width",
        type=_positive_int,
        default=4,
        help="draft depth of the long workload, a chain (both engines; default 4)",
    )
    parser.add_argument(
        "--long-draft-context",
        type=_positive_int_or_all,
        default=256,
        metavar="N|all",
        help="stored positions our draft attends to in the long workload (default 256; all: "
        "the whole history)",
    )
    parser.add_argument(
        "--undo-depth", type=int, default=None, help="our engine's undo_depth (default: engine's)"
    )
    args = parser.parse_args(argv)
    if args.undo_depth is not None and args.undo_depth < 0:
        parser.error("--undo-depth must be >= 0")
    if args.time_limit is not None and not args.time_limit > 0:
        parser.error("--time-limit must be positive")
    if args.min_turn_seconds is not None and not args.min_turn_seconds >= 0:
        parser.error("--min-turn-seconds must be zero or positive")
    return args


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_int_or_all(text: str) -> int | None:
    return None if text == "all" else _positive_int(text)


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = [n for n in WORKLOAD_NAMES if n in (args.workload or DEFAULT_WORKLOADS)]
    all_shapes = shapes(args.quick)
    time_limit = args.time_limit or (30.0 if args.quick else 180.0)
    min_turn_seconds = args.min_turn_seconds
    if min_turn_seconds is None:
        min_turn_seconds = 0.0 if args.quick else 0.5
    tuning = Tuning(
        draft_width=args.draft_width,
        draft_branching=args.branching,
        max_draft_nodes=args.max_draft_nodes,
        undo_depth=args.undo_depth,
        long_draft_width=args.long_draft_width,
        long_draft_context=args.long_draft_context,
    )
    ours = OurEngine()
    module = None if args.no_reference else reference.load()
    theirs = reference.ReferenceEngine(module) if module is not None else None
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "argv": sys.argv[1:] if argv is None else argv,
        "environment": environment(BENCHMARKS.parent),
        "tuning": tuning.__dict__,
        "time_limit_seconds": time_limit,
        "min_turn_seconds": min_turn_seconds,
        "comparison_note": reference.COMPARISON_NOTE,
        "reference": {
            "available": theirs is not None,
            "version": theirs.version if theirs else None,
            "reason": (
                "--no-reference given"
                if args.no_reference
                else "core-deepinfer is not installed (pip install core-deepinfer)"
            )
            if theirs is None
            else None,
        },
        "workloads": {},
    }
    engines = [e for e in (ours, theirs) if e is not None]
    if any(n not in TUI_WORKLOADS for n in selected):
        for engine in engines:
            progress(f"warming up {engine.label}")
            warm_up(engine, tuning)
    workloads = results["workloads"]
    for name in selected:
        shape = all_shapes[name]
        entry: dict[str, Any] = {"shape": shape_dict(shape)}
        workloads[name] = entry
        if name in ("batch", "batch-greedy"):
            progress(f"{name} on {' and '.join(e.label for e in engines)}, in turns")
            entry.update(
                run_batch_in_turns(
                    engines,
                    shape,
                    tuning,
                    time_limit=time_limit,
                    repeat=args.repeat,
                    min_turn_seconds=min_turn_seconds,
                )
            )
            entry["ratio"] = batch_ratios(entry["ours"], entry.get("reference"))
        elif name == "long":
            progress(
                f"long on {' and '.join(e.label for e in engines)}, in turns "
                f"(contexts {list(shape.lengths)})"
            )
            fewer: dict[str, dict[int, int]] = {}
            if theirs is not None and args.reference_tokens_at_4096:
                fewer[theirs.name] = {4096: args.reference_tokens_at_4096}
            entry.update(
                run_long_in_turns(
                    engines,
                    shape,
                    tuning,
                    time_limit=time_limit,
                    repeat=args.repeat,
                    new_tokens_at=fewer,
                    min_turn_seconds=min_turn_seconds,
                )
            )
            entry["ratio"] = long_ratios(entry["ours"], entry.get("reference"))
            progress("long: the floor of a greedy decode step")
            entry["decode_floor"] = decode_floor(
                shape.lengths, MODEL_SHAPE["width"], MODEL_SHAPE["depth"], MODEL_SHAPE["vocab_size"]
            )
        elif name in TUI_WORKLOADS:
            progress(f"{name}: {shape.presses} presses at {shape.requests} requests")
            entry["ours"] = run_tui_repeated(shape, args.repeat)
            entry["note"] = "the reference has no user interface: no comparison"
    if not args.no_memory:
        results["memory"] = memory_pass(ours, selected, all_shapes, tuning, time_limit)
    results["targets"] = evaluate_targets(results)
    print(render(results))
    write_json(args.json, results)
    print(f"\nJSON written to {args.json}")
    return 0


def memory_pass(
    ours: OurEngine,
    selected: list[str],
    all_shapes: dict[str, Any],
    tuning: Tuning,
    time_limit: float,
) -> dict[str, Any]:
    """Our engine again under tracemalloc: peaks, per-step transients, growth with context."""
    memory: dict[str, Any] = {"note": "tracemalloc, our engine only; timings of this pass unused"}
    for name in ("batch", "batch-greedy"):
        if name in selected:
            progress(f"memory pass: {name}")
            memory[name] = batch_memory(ours, all_shapes[name], tuning, time_limit=time_limit * 4)
    if "long" in selected:
        progress("memory pass: long")
        memory["long"] = long_memory(ours, all_shapes["long"], tuning, time_limit=time_limit * 4)
    return memory


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write through a temporary name and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(temporary, path)


if __name__ == "__main__":
    raise SystemExit(main())
