"""deepinfer engine: a pure NumPy paged, prefix-caching, speculative inference engine."""

from .config import EngineConfig, RequestError, Result
from .engine import Engine
from .model import State, TinyModel, make_draft
from .reference import greedy_generate

__all__ = [
    "Engine",
    "EngineConfig",
    "RequestError",
    "Result",
    "State",
    "TinyModel",
    "greedy_generate",
    "make_draft",
]
