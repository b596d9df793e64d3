"""Speculation: draft trees, the verification budget, acceptance, and the drafters."""

from .acceptance import Acceptance, accept
from .budget import Budget, choose_budget, select_nodes, split_budget, validate_cost_curve
from .tree import ROOT, DraftTree, best_nodes, expand, top_children

__all__ = [
    "ROOT",
    "Acceptance",
    "Budget",
    "DraftTree",
    "accept",
    "best_nodes",
    "choose_budget",
    "expand",
    "select_nodes",
    "split_budget",
    "top_children",
    "validate_cost_curve",
]
