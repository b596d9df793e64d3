"""Sampling: SamplingParams, the distribution they make of a logits row, and reproducible noise.

A request's random numbers at an absolute position come from a counter-based stream keyed by
(seed, position, stream): SplitMix64's finaliser over the key and the index. So the token chosen at
a position depends only on the seed, the position and the logits there, never on batching,
drafts, chunking, preemption, undo or replay. Temperature 0 is greedy: the argmax, no noise.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .model import is_integer, is_number

TARGET_STREAM = 0  # the target's choices (and, under rejection, its acceptance draws)
DRAFT_STREAM = 1  # a sampling draft's proposals
SEED_LIMIT = 2**64  # seeds are 64-bit: the first word of the Philox key
_STREAMS = 4  # streams per position in the key's second word


@dataclass(frozen=True)
class SamplingParams:
    """How a request chooses its tokens (validated, frozen). Temperature 0 is greedy."""

    temperature: float = 0.0
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the fewest most likely tokens whose mass reaches top_p
    seed: int | None = None  # None: the engine draws one at submit

    def __post_init__(self) -> None:
        t = self.temperature
        if not is_number(t) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        object.__setattr__(self, "temperature", float(t))
        if not is_integer(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be a non-negative integer, got {self.top_k!r}")
        object.__setattr__(self, "top_k", int(self.top_k))
        p = self.top_p
        if not is_number(p) or not math.isfinite(p) or not 0 < p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1], got {p!r}")
        object.__setattr__(self, "top_p", float(p))
        seed = self.seed
        if seed is not None:
            if not is_integer(seed) or not 0 <= seed < SEED_LIMIT:
                raise ValueError(f"seed must be None or an integer in [0, 2**64), got {seed!r}")
            object.__setattr__(self, "seed", int(seed))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def seeded(self) -> SamplingParams:
        """These parameters with a seed: a drawn one when none was given (greedy needs none)."""
        if self.greedy or self.seed is not None:
            return self
        return SamplingParams(self.temperature, self.top_k, self.top_p, secrets.randbelow(2**32))

    def describe(self) -> str:
        """`greedy`, or e.g. `T0.8 k20 p0.9 s123` (only the settings in use)."""
        if self.greedy:
            return "greedy"
        parts = [f"T{self.temperature:g}"]
        if self.top_k:
            parts.append(f"k{self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"p{self.top_p:g}")
        if self.seed is not None:
            parts.append(f"s{self.seed}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
        }

    def settings(self) -> dict[str, Any]:
        """A request's settings entry: the sampling, seed included, unless it is greedy (a
        greedy request's settings and `queued` event stay as they were)."""
        return {} if self.greedy else {"sampling": self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingParams:
        if not isinstance(data, Mapping):
            raise ValueError(f"sampling must be a mapping, got {type(data).__name__}")
        unknown = sorted(map(str, set(data) - set(cls.__dataclass_fields__)))
        if unknown:
            raise ValueError(f"unknown sampling field(s): {', '.join(unknown)}")
        return cls(**data)


GREEDY = SamplingParams()


def check_sampling(sampling: object) -> SamplingParams:
    if sampling is None:
        return GREEDY
    if isinstance(sampling, Mapping):
        return SamplingParams.from_dict(sampling)
    if not isinstance(sampling, SamplingParams):
        raise ValueError(
            f"sampling must be a SamplingParams or a mapping, got {type(sampling).__name__}"
        )
    return sampling


def distribution(logits: np.ndarray, sampling: SamplingParams) -> np.ndarray:
    """The probabilities one logits row gives after temperature, top-k and top-p (in that
    order, as vLLM applies them); greedy is a point mass on the argmax (the first on ties)."""
    rows = np.asarray(logits, dtype=np.float64)[None, :]
    return distributions(rows, [sampling])[0]


def distributions(logits: np.ndarray, params: list[SamplingParams]) -> np.ndarray:
    """`distribution` of every row of `logits` with its own parameters, in one pass (the
    oracle's single row takes the same path, so both compute the same numbers)."""
    logits = np.asarray(logits, dtype=np.float64)
    vocab = logits.shape[1]
    temperature = np.array([p.temperature for p in params])
    greedy = temperature == 0.0
    scaled = logits / np.where(greedy, 1.0, temperature)[:, None]
    probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top_k = np.array([p.top_k or vocab for p in params])
    top_p = np.array([p.top_p for p in params])
    top_k[greedy] = 1
    if (top_k < vocab).any() or (top_p < 1.0).any():
        order = np.argsort(-probs, axis=-1, kind="stable")  # ties keep token order
        ranked = np.take_along_axis(probs, order, axis=-1)
        ranked[np.arange(vocab)[None, :] >= top_k[:, None]] = 0.0
        mass = np.cumsum(ranked / ranked.sum(axis=-1, keepdims=True), axis=-1)
        # The fewest tokens whose mass reaches top_p (a hair of slack for rounding).
        keep = np.minimum(top_k, (mass < (top_p - 1e-12)[:, None]).sum(axis=-1) + 1)
        ranked[np.arange(vocab)[None, :] >= keep[:, None]] = 0.0
        probs = np.zeros_like(probs)
        np.put_along_axis(probs, order, ranked, axis=-1)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


# SplitMix64's increment and finaliser: a counter-based generator, vectorised over keys.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def noise_rows(
    seeds: np.ndarray | list[int], positions: np.ndarray | list[int], stream: int, vocab_size: int
) -> np.ndarray:
    """`vocab_size + 1` uniforms in [0, 1) per (seed, position) row, for `stream`: the first
    `vocab_size` drive the exponential race, the last is an acceptance draw. Each value is a
    hash of (seed, position, stream, index) alone."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    counters = np.asarray(positions, dtype=np.uint64) * np.uint64(_STREAMS) + np.uint64(stream)
    keys = _mix(seeds ^ _mix((counters + np.uint64(1)) * _GOLDEN))
    index = np.arange(1, vocab_size + 2, dtype=np.uint64)
    bits = _mix(keys[:, None] + index[None, :] * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def noise(seed: int, position: int, stream: int, vocab_size: int) -> np.ndarray:
    """`noise_rows` of one (seed, position)."""
    return noise_rows([seed], [position], stream, vocab_size)[0]


def race(probs: np.ndarray, uniforms: np.ndarray) -> np.ndarray | int:
    """The exponential race: the token whose exponential time E / p arrives first is a sample
    of `probs` (tokens with p = 0 never arrive). Works on the last axis of batched arrays."""
    times = -np.log1p(-uniforms[..., : probs.shape[-1]])  # Exp(1); 1 - u > 0 always
    with np.errstate(divide="ignore"):
        arrival = np.where(probs > 0, times / np.where(probs > 0, probs, 1.0), np.inf)
    winner = np.argmin(arrival, axis=-1)
    return int(winner) if np.ndim(winner) == 0 else winner


def choose(logits: np.ndarray, sampling: SamplingParams, position: int) -> int:
    """The token a request chooses at absolute `position` from one target logits row."""
    if sampling.greedy:
        return int(np.argmax(logits))
    probs = distribution(logits, sampling)
    assert sampling.seed is not None, "a sampled request gets its seed at submit"
    return int(race(probs, noise(sampling.seed, position, TARGET_STREAM, len(probs))))
