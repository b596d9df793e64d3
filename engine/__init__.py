"""deepinfer engine: a pure NumPy paged, prefix-caching, speculative inference engine."""

from .config import EngineConfig, RequestError, Result
from .engine import Engine
from .kv import pool_blocks
from .model import State, TinyModel, make_draft
from .reference import Generation, greedy_generate, sample_generate
from .request import MAX_REQUEST_ID_LENGTH, check_request_id, label_problem
from .sampling import SamplingParams
from .speculation.ngram import NgramDrafter

__all__ = [
    "MAX_REQUEST_ID_LENGTH",
    "Engine",
    "EngineConfig",
    "Generation",
    "NgramDrafter",
    "RequestError",
    "Result",
    "SamplingParams",
    "State",
    "TinyModel",
    "check_request_id",
    "greedy_generate",
    "label_problem",
    "make_draft",
    "pool_blocks",
    "sample_generate",
]
