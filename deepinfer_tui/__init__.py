"""deepinfer-tui: a terminal visual debugger for the deepinfer engine."""

__version__ = "0.1.0"
