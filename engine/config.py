"""EngineConfig and Result: the engine's plain, validated data types."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .model import RECOVERY_MODES, TinyModel, is_integer, is_number
from .speculation.acceptance import check_acceptance
from .speculation.budget import validate_cost_curve

# Positions one pool may hold: far beyond any use here (at width 32 a position's target rows
# take 3.3 KB, so this many would need 55 GB).
MAX_POOL_POSITIONS = 2**24
CACHE_POLICIES = ("ttl", "blocks", "radix")
# fcfs: arrival order; priority: smaller `priority` first (vLLM); lpm: longest cached prefix
# first (SGLang's cache-aware policy).
SCHEDULE_POLICIES = ("fcfs", "priority", "lpm")


def _check_int(name: str, value: object, minimum: int) -> int:
    if not is_integer(value) or value < minimum:
        qualifier = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be a {qualifier} integer, got {value!r}")
    return int(value)


def _check_cache_policy(policy: object, recovery_mode: str) -> None:
    if not isinstance(policy, str) or policy not in CACHE_POLICIES:
        raise ValueError(f"unknown cache_policy {policy!r}; use one of {', '.join(CACHE_POLICIES)}")
    if policy != "ttl" and recovery_mode != "exact":
        # Their blocks are reused at any block boundary: only exact rows allow that.
        raise ValueError(
            f"cache_policy {policy!r} needs recovery_mode 'exact', got {recovery_mode!r}"
        )


@dataclass(frozen=True)
class EngineConfig:
    """Scheduling, speculation, paging, caching and history settings (validated, frozen)."""

    max_batch_tokens: int = 16  # verified positions per round, all requests together
    max_active: int = 4  # requests holding KV at once (so also run per round)
    draft_width: int = 4  # deepest draft node
    draft_branching: int = 1  # children per expanded node; 1 = a chain
    max_draft_nodes: int = 16  # non-root nodes per request per round
    draft_context: int | None = None  # stored positions the draft attends to (None = all)
    block_size: int = 16
    # Blocks in the KV pool; None sizes it from `kv_cache_memory_mib`, as vLLM sizes its pool
    # from a memory budget rather than a count.
    num_blocks: int | None = None
    kv_cache_memory_mib: float = 32.0  # the default pool's rows, all models together
    state_ttl: float = 3.0  # hot cursor lifetime (seconds of the injected clock)
    prefix_ttl: float = 100.0  # warm encoder-prefix lifetime
    recovery_mode: str = "exact"
    keep: int = 8  # bounded recovery: positions local attention sees after a restore
    cost_curve: tuple[tuple[int, float], ...] | None = None  # synthetic (graph size, cost)
    cache_capacity: int = 64  # prefix-cache entries (ttl policy)
    # "ttl" (hot/warm entries with lifetimes), "blocks" (vLLM's automatic prefix caching:
    # block hashes and an LRU free queue) or "radix" (SGLang's radix tree); see
    # docs/cache-policies.md.
    cache_policy: str = "ttl"
    undo_depth: int = 64  # rounds that undo() can rewind
    # The model's speed tricks (chain path, length groups, chunking, padded contexts, work
    # buffers); False runs the plain tree-masked forward alone, for reading and stepping.
    fast_paths: bool = True
    # Target rows one round computes, all requests together (prefill chunks, pending positions
    # and verified draft nodes), as vLLM v1's per-step token budget; None = unbounded.
    token_budget: int | None = 2048
    long_prefill_threshold: int | None = None  # rows of one request's prompt chunk per round
    schedule_policy: str = "fcfs"  # admission order: fcfs | priority | lpm
    # After each round, add its batch's cost (cost_curve, or metrics.SECONDS_PER_ROW a row)
    # to every clock reading: latencies that mean something without hardware (synthetic).
    synthetic_clock: bool = False
    # How a sampled request's draft is checked: "coupled" (the target's seeded sample decides:
    # tokens equal sample_generate's) or "rejection" (min(1, p/q), a chain only).
    draft_acceptance: str = "coupled"

    def __post_init__(self) -> None:
        for name in (
            "max_batch_tokens",
            "max_active",
            "draft_width",
            "draft_branching",
            "max_draft_nodes",
            "block_size",
            "keep",
            "cache_capacity",
        ):
            # Stored as int: a NumPy integer would not survive to_dict()'s JSON.
            object.__setattr__(self, name, _check_int(name, getattr(self, name), 1))
        object.__setattr__(self, "undo_depth", _check_int("undo_depth", self.undo_depth, 0))
        for name in ("fast_paths", "synthetic_clock"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        self._check_pool()
        for name in ("draft_context", "token_budget", "long_prefill_threshold"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _check_int(name, getattr(self, name), 1))
        if self.schedule_policy not in SCHEDULE_POLICIES:
            raise ValueError(
                f"unknown schedule_policy {self.schedule_policy!r}; "
                f"use one of {', '.join(SCHEDULE_POLICIES)}"
            )
        for name in ("state_ttl", "prefix_ttl"):
            value = getattr(self, name)
            if not is_number(value):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be finite and positive, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.recovery_mode not in RECOVERY_MODES:
            raise ValueError(
                f"unknown recovery_mode {self.recovery_mode!r}; "
                f"use one of {', '.join(RECOVERY_MODES)}"
            )
        check_acceptance(self.draft_acceptance, self.draft_branching)
        _check_cache_policy(self.cache_policy, self.recovery_mode)
        curve = None
        if self.cost_curve is not None:
            curve = validate_cost_curve(self.cost_curve, self.max_batch_tokens) or None
        object.__setattr__(self, "cost_curve", curve)

    def _check_pool(self) -> None:
        """The pool's size settings: a block count or a memory budget, within what a pool may
        hold."""
        if self.num_blocks is not None:
            object.__setattr__(self, "num_blocks", _check_int("num_blocks", self.num_blocks, 1))
        memory = self.kv_cache_memory_mib
        if not is_number(memory) or not math.isfinite(memory) or memory <= 0:
            raise ValueError(
                f"kv_cache_memory_mib must be a finite positive number, got {memory!r}"
            )
        object.__setattr__(self, "kv_cache_memory_mib", float(memory))
        if (self.num_blocks or 1) * self.block_size > MAX_POOL_POSITIONS:
            # Named here: NumPy would fail later with "Maximum allowed dimension exceeded" or
            # an allocation error that names neither setting.
            sizes = f"block_size = {self.block_size}"
            if self.num_blocks is not None:
                sizes = f"num_blocks x block_size = {self.num_blocks} x {self.block_size}"
            raise ValueError(
                f"{sizes} positions is more than a pool may hold ({MAX_POOL_POSITIONS})"
            )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["cost_curve"] is not None:
            data["cost_curve"] = [list(p) for p in data["cost_curve"]]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        if not isinstance(data, Mapping):
            raise ValueError(
                f"config must be a mapping of EngineConfig fields, got {type(data).__name__}"
            )
        known = set(cls.__dataclass_fields__)
        unknown = sorted(map(str, set(data) - known))  # str: a key may be any hashable
        if unknown:
            raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
        return cls(**data)  # __post_init__ validates every field (a cost curve's points too)


@dataclass(frozen=True)
class Result:
    request_id: str
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    finish_reason: str
    error: str | None = None
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    # queued / scheduled / first_token / finished and the intervals (see engine/metrics.py).
    # Not compared: two runs of the same requests are equal results at different times.
    timing: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "prompt": list(self.prompt),
            "tokens": list(self.tokens),
            "finish_reason": self.finish_reason,
            "error": self.error,
            "accepted_drafts": self.accepted_drafts,
            "proposed_drafts": self.proposed_drafts,
            "timing": {k: list(v) if isinstance(v, list) else v for k, v in self.timing.items()},
        }


class RequestError(RuntimeError):
    """Raised by `run()` after healthy requests drained, when some finished with an error."""

    def __init__(self, results: list[Result]) -> None:
        self.results = results
        failed = [f"{r.request_id}: {r.error}" for r in results if r.finish_reason == "error"]
        super().__init__("requests failed: " + "; ".join(failed))


def checked_models(
    target: TinyModel | None, draft: TinyModel | None, config: EngineConfig | None
) -> tuple[TinyModel, EngineConfig]:
    """The engine's target (a default one if None) and config, checked with the draft."""
    target = target if target is not None else TinyModel()
    if not isinstance(target, TinyModel):
        raise ValueError(f"target must be a TinyModel, got {type(target).__name__}")
    if draft is not None and not isinstance(draft, TinyModel):
        raise ValueError(
            f"draft must be a TinyModel or an NgramDrafter, got {type(draft).__name__}"
        )
    config = config if config is not None else EngineConfig()
    if not isinstance(config, EngineConfig):
        raise ValueError("config must be an EngineConfig")
    if draft is not None and draft.vocab_size != target.vocab_size:
        raise ValueError("target and draft must share a vocabulary")
    if config.recovery_mode != "exact":
        for model in (target, draft):
            if model is not None and model.window > config.keep:
                raise ValueError(f"keep={config.keep} must cover the local window ({model.window})")
    return target, config
