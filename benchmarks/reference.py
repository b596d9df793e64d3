"""The reference package `core-deepinfer`, when installed, as a second engine under test.

Its TinyModel is a different network from ours (different layers and weights), so the harness
compares work of the same *shape*: the same number of requests, prompt lengths, new tokens,
verification budget and draft depth, with models of the same vocab, width, depth and window.
Its speculative mode uses an independent one-layer TinyModel as the draft (seed 8), as its own
README shows; ours uses `make_draft` (a perturbed copy of the target's first layer), so the two
accept drafts at very different rates and speculative ratios mix engine speed with draft quality.
"""

from __future__ import annotations

from typing import Any

from engines import MODEL_SHAPE, TARGET_SEED, EngineSpec

COMPARISON_NOTE = (
    "The reference (core-deepinfer) runs a different TinyModel with an independent draft, so "
    "these ratios compare engine work of the same shape (requests, prompt lengths, new tokens, "
    "verification budget, draft depth; vocab 64, width 32, depth 3, window 8), not identical "
    "computations. Speculative ratios also reflect the two drafts' different acceptance rates."
)
REFERENCE_DRAFT = {"depth": 1, "seed": 8}


def load() -> Any | None:
    """The reference module, or None when it is not installed."""
    try:
        import core_deepinfer
    except ImportError:
        return None
    return core_deepinfer


class ReferenceEngine:
    """core-deepinfer driven through its public API only."""

    name = "reference"
    label = "core-deepinfer (reference)"
    verified_key = "verified_drafts"

    def __init__(self, module: Any) -> None:
        self.module = module
        self.version = getattr(module, "__version__", None)

    def build(self, spec: EngineSpec) -> Any:
        m = self.module
        target = m.TinyModel(seed=TARGET_SEED, **MODEL_SHAPE)
        draft = None
        if spec.speculative:
            draft = m.TinyModel(**dict(MODEL_SHAPE, **REFERENCE_DRAFT))
        config = m.EngineConfig(
            max_batch_tokens=spec.max_batch_tokens,
            max_active=spec.max_active,
            draft_width=spec.draft_width,
        )
        return m.Engine(target, draft, config=config)

    def counters(self, engine: Any) -> dict[str, Any]:
        return {"work": engine.metrics()}

    def describe(self, spec: EngineSpec) -> dict[str, Any]:
        return {
            "package": "core-deepinfer",
            "version": self.version,
            "target": dict(MODEL_SHAPE, seed=TARGET_SEED),
            "draft": dict(MODEL_SHAPE, **REFERENCE_DRAFT) if spec.speculative else None,
            "config": {
                "max_batch_tokens": spec.max_batch_tokens,
                "max_active": spec.max_active,
                "draft_width": spec.draft_width,
            },
            "note": "no paged pool: block_size/num_blocks do not apply",
        }
