"""Export time of a large session: `python benchmarks/export_time.py [--new-tokens N] [--repeat N]`.

Runs issue 26's scenario (48 requests on 4 shared 208-token prefixes, prompts of 219-1,884
tokens, the `tui-prefixes` workload's) to its end, then times rendering each export in memory
(nothing is written): the document (SVG, HTML and text from one recording), the JSON trace and
the Perfetto file, and prints the median of `--repeat` runs with the sizes. More new tokens
make a longer session (16: about 110 rounds; 256: about 1,450). Not part of run.py's table:
compare two versions by alternating their runs on the same machine. Not part of the tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
if str(BENCHMARKS.parent) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS.parent))

from tui_latency import prefix_scenario_document  # noqa: E402
from workloads import TuiShape  # noqa: E402

from deepinfer_tui.export import render_exports  # noqa: E402
from deepinfer_tui.scenario import parse_scenario  # noqa: E402
from deepinfer_tui.session import Session  # noqa: E402

PARTS = {"document": ("svg", "html", "txt"), "json": ("json",), "perfetto": ("perfetto",)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=16, help="per request (default 16)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per part (default 3)")
    options = parser.parse_args()
    shape = TuiShape(
        requests=48, prompt_tokens=0, new_tokens=options.new_tokens, presses=0, prefixes=4
    )
    session = Session(parse_scenario(prefix_scenario_document(shape)))
    started = time.perf_counter()
    session.run()
    ran = time.perf_counter() - started
    print(f"session: {session.engine.tick} rounds, {len(session.log())} events, ran in {ran:.1f} s")
    for part, formats in PARTS.items():
        seconds, texts = [], {}
        for _ in range(max(1, options.repeat)):
            started = time.perf_counter()
            texts = render_exports(session, formats)
            seconds.append(time.perf_counter() - started)
        sizes = ", ".join(f"{name} {len(text) / 1e6:.2f} MB" for name, text in texts.items())
        median = statistics.median(seconds)
        print(f"{part:9} median {median:6.2f} s (min {min(seconds):.2f}) · {sizes}")


if __name__ == "__main__":
    main()
