"""What the numbers were measured on: interpreter, NumPy, BLAS kernel and threads, machine.

On some processors OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set in the environment (older
OpenBLAS builds misbehave without them); they make a current NumPy slower. The harness never
changes them, it reports them, so a result can be read in context.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

BLAS_VARIABLES = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


def blas_info() -> list[dict[str, Any]]:
    """The BLAS libraries NumPy loaded: kernel (architecture), threads, version."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return _blas_info_without_threadpoolctl()
    return [
        {
            "source": "threadpoolctl",
            "library": info.get("internal_api"),
            "version": info.get("version"),
            "architecture": info.get("architecture"),
            "num_threads": info.get("num_threads"),
            "threading_layer": info.get("threading_layer"),
        }
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]


def _blas_info_without_threadpoolctl() -> list[dict[str, Any]]:
    """NumPy's build summary, plus the loaded OpenBLAS's own answers where it can be asked."""
    info: dict[str, Any] = {"source": "numpy.show_config"}
    try:
        config = np.show_config(mode="dicts")
        blas = config.get("Build Dependencies", {}).get("blas", {})
        info.update(
            library=blas.get("name"),
            version=blas.get("version"),
            build=blas.get("openblas configuration"),
        )
    except (TypeError, AttributeError):  # NumPy older than 1.25 prints instead
        pass
    info.update(_ask_openblas())
    return [info]


def _ask_openblas() -> dict[str, Any]:
    """Call the loaded OpenBLAS for its core name and thread count (Linux only)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return {}
    paths = sorted({line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower()})
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        answers: dict[str, Any] = {}
        for suffix in ("", "64_"):
            for prefix in ("openblas_", "scipy_openblas_"):
                core = getattr(library, f"{prefix}get_corename{suffix}", None)
                threads = getattr(library, f"{prefix}get_num_threads{suffix}", None)
                if core is not None and "architecture" not in answers:
                    core.restype = ctypes.c_char_p
                    answers["architecture"] = core().decode()
                if threads is not None and "num_threads" not in answers:
                    threads.restype = ctypes.c_int
                    answers["num_threads"] = int(threads())
        if answers:
            return answers
    return {}


def _git(root: Path, *args: str) -> str | None:
    """A git command's output in `root`, or None when git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_commit(root: Path) -> str | None:
    return (_git(root, "rev-parse", "--short", "HEAD") or "").strip() or None


def uncommitted_changes(root: Path) -> list[str] | None:
    """Files under engine/ and deepinfer_tui/ that differ from the commit (measured as is)."""
    out = _git(root, "status", "--porcelain", "--", "engine", "deepinfer_tui")
    if out is None:
        return None
    return [line[3:] for line in out.splitlines() if line.strip()]


def environment(root: Path) -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "blas": blas_info(),
        "blas_environment": {name: os.environ.get(name) for name in BLAS_VARIABLES},
        "git_commit": git_commit(root),
        "uncommitted_changes": uncommitted_changes(root),
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def describe_blas(env: dict[str, Any]) -> str:
    """One line for the printed report."""
    parts = []
    for lib in env["blas"]:
        text = f"{lib.get('library') or 'BLAS'} {lib.get('version') or ''}".strip()
        if lib.get("architecture"):
            text += f" kernel={lib['architecture']}"
        if lib.get("num_threads") is not None:
            text += f" threads={lib['num_threads']}"
        text += f" (via {lib.get('source')})"
        parts.append(text)
    settings = ", ".join(f"{k}={v}" for k, v in env["blas_environment"].items() if v is not None)
    return "; ".join(parts or ["BLAS unknown"]) + " | env: " + (settings or "no BLAS variables set")
