"""Profile our engine on one workload with cProfile: where the time goes, before optimising.

    python benchmarks/profile_workload.py batch
    python benchmarks/profile_workload.py long --context 2048 --mode speculative
    python benchmarks/profile_workload.py long --context 4096 --phase decode
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
from functools import partial
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from engines import OurEngine  # noqa: E402
from measure import StepRecord, drive  # noqa: E402
from tui_latency import run_tui  # noqa: E402
from workloads import (  # noqa: E402
    TUI_WORKLOADS,
    LongShape,
    TuiShape,
    Tuning,
    long_spec,
    random_prompts,
    run_batch,
    shapes,
    warm_up,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/profile_workload.py")
    parser.add_argument("workload", choices=("batch", "batch-greedy", "long", *TUI_WORKLOADS))
    parser.add_argument("--context", type=int, default=2048, help="long: prompt length")
    parser.add_argument("--mode", choices=("greedy", "speculative"), default="speculative")
    parser.add_argument(
        "--phase",
        choices=("all", "prefill", "decode"),
        default="all",
        help="long: profile the whole run, only the first round (prefill) or only after it",
    )
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
    if isinstance(shape, LongShape):
        phase = "" if args.phase == "all" else f"-{args.phase}"
        label = f"long-{args.context}-{args.mode}{phase}"
        profile_long(profiler, ours, shape, tuning, args.context, args.mode, args.phase)
    elif isinstance(shape, TuiShape):
        label = args.workload
        profiler.enable()
        outcome = run_tui(shape)  # the app's event loop runs in this thread: it is profiled
        profiler.disable()
        if "error" in outcome:
            print(f"tui: {outcome['error']}", file=sys.stderr)
    else:
        label = args.workload
        profiler.enable()
        run_batch(ours, shape, tuning, time_limit=600.0)
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


def profile_long(
    profiler: cProfile.Profile,
    ours: OurEngine,
    shape: LongShape,
    tuning: Tuning,
    context: int,
    mode: str,
    phase: str,
) -> None:
    """One long-context request; the profiler runs for the chosen phase only."""
    spec = long_spec(context, shape, mode == "speculative", tuning)

    def switch(index: int, _step: StepRecord) -> None:
        if index == 0 and phase == "prefill":
            profiler.disable()
        elif index == 0 and phase == "decode":
            profiler.enable()

    if phase != "decode":
        profiler.enable()
    drive(
        partial(ours.build, spec),
        random_prompts(1, context, seed=1000 + context),
        shape.new_tokens,
        verified_key=ours.verified_key,
        time_limit=600.0,
        on_step=switch,
    )
    profiler.disable()


def _body(text: str) -> str:
    """pstats output from the column header on (its preamble repeats the file name)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.lstrip().startswith("ncalls"):
            return "\n".join(lines[index:]).rstrip()
    return text.rstrip()


if __name__ == "__main__":
    raise SystemExit(main())
