"""The dependency direction is a rule: engine is pure, and the debugger's core is Textual-free."""

import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[1] / "deepinfer_tui" / "cli"


def _loaded_after_import(module: str) -> set[str]:
    code = (
        f"import sys, {module}; print(','.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


def test_engine_loads_neither_textual_nor_rich() -> None:
    loaded = _loaded_after_import("engine")
    assert "numpy" in loaded
    assert not loaded & {"textual", "rich", "deepinfer_tui"}


@pytest.mark.parametrize(
    "module",
    [
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
        "deepinfer_tui.cli",
        # every module of the command line, each on its own (the app loads only on launch)
        *sorted(f"deepinfer_tui.cli.{p.stem}" for p in CLI.glob("*.py") if p.stem != "__init__"),
    ],
)
def test_debugger_core_never_imports_textual(module: str) -> None:
    assert "textual" not in _loaded_after_import(module)
