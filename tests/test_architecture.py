"""The dependency direction is a rule: engine is pure, and the debugger's core is Textual-free."""

import subprocess
import sys

import pytest


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
        "deepinfer_tui.export",
        "deepinfer_tui.document",
        "deepinfer_tui.legend",
        "deepinfer_tui.parsing",
        "deepinfer_tui.cli",
        "deepinfer_tui.cli.shapes",
        "deepinfer_tui.cli.exits",
        "deepinfer_tui.cli.options",
        "deepinfer_tui.cli.common",
        "deepinfer_tui.cli.demo",
        "deepinfer_tui.cli.generate",
        "deepinfer_tui.cli.bounded",
        "deepinfer_tui.cli.export",
        "deepinfer_tui.cli.replay",
        "deepinfer_tui.cli.guide",
        "deepinfer_tui.cli.debugger",
        "deepinfer_tui.cli.program",
    ],
)
def test_debugger_core_never_imports_textual(module: str) -> None:
    assert "textual" not in _loaded_after_import(module)
