"""The `deepinfer-tui` process entry point: what must happen before NumPy loads, then the CLI."""

from __future__ import annotations

import os


def main() -> int:
    # One BLAS thread unless the user chose otherwise: the engine's matrices are small, and a
    # second OpenBLAS thread that spins waiting for a busy core made rounds up to 7x slower on a
    # loaded 2-core machine (a keypress should stay fast however busy the machine is).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from deepinfer_tui.cli import main as run_cli

    return run_cli()
