"""The engines under test, behind one small interface: build an engine for a workload's shape.

`EngineSpec` is the shape of the work (speculative or not, how many requests run together, how
many positions a round may verify, how big the paged pool is); each adapter turns it into its
own engine's configuration. Models are always vocab 64, width 32, depth 3, window 8.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

# Running `python benchmarks/run.py` from a checkout puts benchmarks/ on sys.path, not the
# project root; the engine package lives there.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

# One BLAS thread unless the caller sets it, before NumPy loads (every harness script imports
# this module first): the engines' matrices are small, and on a shared 2-core machine a second
# OpenBLAS thread spinning for a busy core made rounds up to 7x slower. Both engines run in one
# process, so they share the setting; the report prints it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from engine import Engine, EngineConfig, TinyModel, make_draft  # noqa: E402

MODEL_SHAPE = {"vocab_size": 64, "width": 32, "depth": 3, "window": 8}
TARGET_SEED = 7
DRAFT_SEED = 8


@dataclass(frozen=True)
class EngineSpec:
    speculative: bool
    max_active: int
    max_batch_tokens: int
    block_size: int = 16
    num_blocks: int = 512
    draft_width: int = 4
    draft_branching: int = 1
    max_draft_nodes: int = 16
    undo_depth: int | None = None  # None: the engine's default
    # Stored positions our draft attends to (None: all). The reference's draft has no such
    # setting: this is our draft's design, not the shape of the work.
    draft_context: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EngineUnderTest(Protocol):
    name: str
    label: str
    verified_key: str  # the commit-event field that counts verified draft tokens

    def build(self, spec: EngineSpec) -> Any: ...

    def counters(self, engine: Any) -> dict[str, Any]: ...

    def describe(self, spec: EngineSpec) -> dict[str, Any]: ...


class OurEngine:
    """deepinfer-tui's engine (this repository's `engine` package)."""

    name = "ours"
    label = "deepinfer-tui engine"
    verified_key = "verified"

    def config(self, spec: EngineSpec) -> EngineConfig:
        options: dict[str, Any] = {
            "max_batch_tokens": spec.max_batch_tokens,
            "max_active": spec.max_active,
            "draft_width": spec.draft_width,
            "draft_branching": spec.draft_branching,
            "max_draft_nodes": spec.max_draft_nodes,
            "block_size": spec.block_size,
            "num_blocks": spec.num_blocks,
        }
        if spec.undo_depth is not None:
            options["undo_depth"] = spec.undo_depth
        if spec.draft_context is not None and spec.speculative:
            options["draft_context"] = spec.draft_context
        return EngineConfig(**options)

    def build(self, spec: EngineSpec) -> Engine:
        # Fresh models per engine, so per-model counters (forward_calls) belong to one run.
        target = TinyModel(seed=TARGET_SEED, **MODEL_SHAPE)
        draft = make_draft(target, seed=DRAFT_SEED) if spec.speculative else None
        return Engine(target, draft, config=self.config(spec))

    def counters(self, engine: Engine) -> dict[str, Any]:
        metrics = engine.metrics()
        proposed = metrics["drafts"]["proposed"]
        return {
            "work": metrics["work"],
            "drafts": metrics["drafts"],
            "engine_acceptance": metrics["drafts"]["accepted"] / proposed if proposed else None,
            "cache": metrics["cache"],
            "requests": metrics["requests"],
            "target_forward_calls": getattr(engine.target, "forward_calls", None),
        }

    def describe(self, spec: EngineSpec) -> dict[str, Any]:
        return {
            "target": dict(MODEL_SHAPE, seed=TARGET_SEED),
            "draft": (
                {"make_draft": {"depth": 1, "noise": 0.1, "seed": DRAFT_SEED}}
                if spec.speculative
                else None
            ),
            "config": self.config(spec).to_dict(),
        }
