"""Profile our engine on one workload with cProfile: where the time goes, before optimising.

    python benchmarks/profile_workload.py batch
    python benchmarks/profile_workload.py long --context 2048 --mode speculative
    python benchmarks/profile_workload.py tui

Prints the top functions by cumulative and by own (total) time and saves the raw profile
(benchmarks/results/profile-<workload>.prof; open it with `python -m pstats` or snakeviz).
(Named profile_workload, not profile: a benchmarks/profile.py would shadow the standard
library module that cProfile imports.)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from dataclasses import replace
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from engines import OurEngine  # noqa: E402
from tui_latency import run_tui  # noqa: E402
from workloads import (  # noqa: E402
    LongShape,
    TuiShape,
    Tuning,
    run_batch,
    run_long,
    shapes,
    warm_up,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/profile_workload.py")
    parser.add_argument("workload", choices=("batch", "batch-greedy", "long", "tui"))
    parser.add_argument("--context", type=int, default=2048, help="long: prompt length")
    parser.add_argument("--mode", choices=("greedy", "speculative"), default="speculative")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="where to save the .prof file")
    args = parser.parse_args(argv)
    if args.context < 1 or args.top < 1:
        parser.error("--context and --top must be positive")
    ours, tuning = OurEngine(), Tuning()
    warm_up(ours, tuning)
    shape = shapes(args.quick)[args.workload]
    profiler = cProfile.Profile()
    profiler.enable()
    if isinstance(shape, TuiShape):
        outcome = run_tui(shape)  # the app's event loop runs in this thread: it is profiled
        if "error" in outcome:
            print(f"tui: {outcome['error']}", file=sys.stderr)
        label = "tui"
    elif isinstance(shape, LongShape):
        run_long(
            ours,
            replace(shape, lengths=(args.context,)),
            tuning,
            time_limit=600.0,
            modes=(args.mode,),
        )
        label = f"long-{args.context}-{args.mode}"
    else:
        run_batch(ours, shape, tuning, time_limit=600.0)
        label = args.workload
    profiler.disable()
    out = args.out or BENCHMARKS / "results" / f"profile-{label}.prof"
    out.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(out)
    for order in ("cumulative", "tottime"):
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer)
        stats.strip_dirs().sort_stats(order).print_stats(args.top)
        print(f"== {label}: top {args.top} by {order} ==")
        print(_body(buffer.getvalue()))
    print(f"profile saved to {out}")
    return 0


def _body(text: str) -> str:
    """pstats output from the column header on (its preamble repeats the file name)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.lstrip().startswith("ncalls"):
            return "\n".join(lines[index:]).rstrip()
    return text.rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
