"""Moved: draft trees, the budget and acceptance live in `engine/speculation/` (tree.py,
budget.py, acceptance.py; the drafters in drafter.py). This name stays while the guides
point here."""

from .speculation import *  # noqa: F403
from .speculation import __all__  # noqa: F401
