"""The deepinfer-tui command line: the debugger, and headless commands for scripts and CI.

One module per command (demo, generate, bounded, export, replay, guide; `debugger` opens the
app), each with its parser builder and its run function; `options` holds the option groups
they share, `exits` the exit-status policy and the guard around standard output, and `shapes`
the JSON every --json prints. docs/cli.md is the reference.
"""

from .exits import OutputLost, UsageError
from .program import build_parser, main

__all__ = ["OutputLost", "UsageError", "build_parser", "main"]
