"""The dependency direction is a rule: engine is pure, and the debugger's core is Textual-free."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[1] / "deepinfer_tui" / "cli"
CORE_MODULES = [
    "deepinfer_tui.session",
    "deepinfer_tui.scenario",
    "deepinfer_tui.describe",
    "deepinfer_tui.guide",
    "deepinfer_tui.replay",
    "deepinfer_tui.tracefile",
    "deepinfer_tui.export",
    "deepinfer_tui.perfetto",
    "deepinfer_tui.document",
    "deepinfer_tui.legend",
    "deepinfer_tui.parsing",
    "deepinfer_tui.availability",
    "deepinfer_tui.bindings",
    "deepinfer_tui.undo_notice",
    "deepinfer_tui.cli",
    # every module of the command line, each on its own (the app loads only on launch)
    *sorted(f"deepinfer_tui.cli.{p.stem}" for p in CLI.glob("*.py") if p.stem != "__init__"),
]

# Imports the modules one after another in a fresh interpreter and prints, after each, the
# top-level packages loaded so far; it stops after the first module that loads Textual.
IMPORT_IN_TURN = """
import importlib, json, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
    print(json.dumps([module, sorted({m.split(".")[0] for m in sys.modules})]), flush=True)
    if "textual" in sys.modules:
        break
"""


def _loaded_after_import(module: str) -> set[str]:
    code = (
        f"import sys, {module}; print(','.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


@functools.cache
def _loaded_by_each_core_module() -> dict[str, set[str] | str]:
    """What importing each core module loads, as if each were imported on its own (or the
    error its import ends in): in one interpreter, modules that load no Textual cannot load it
    for a later one, so a fresh interpreter is needed only after a module that does or fails
    (one in all when none does)."""
    loaded: dict[str, set[str] | str] = {}
    while len(loaded) < len(CORE_MODULES):
        rest = [m for m in CORE_MODULES if m not in loaded]
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_IN_TURN, *rest],
            capture_output=True,
            text=True,
            timeout=300,
        )
        for line in done.stdout.splitlines():
            module, packages = json.loads(line)
            loaded[module] = set(packages)
        if done.returncode:
            loaded[rest[len(done.stdout.splitlines())]] = done.stderr
    return loaded


def test_engine_loads_neither_textual_nor_rich() -> None:
    loaded = _loaded_after_import("engine")
    assert "numpy" in loaded
    assert not loaded & {"textual", "rich", "deepinfer_tui"}


@pytest.mark.parametrize("module", CORE_MODULES)
def test_debugger_core_never_imports_textual(module: str) -> None:
    loaded = _loaded_by_each_core_module()[module]
    assert isinstance(loaded, set), loaded  # else the error its import ended in
    assert "textual" not in loaded
