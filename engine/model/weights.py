"""A TinyModel's parameters, their fused copies for the batched forwards, and its `State`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Consumer layer i adds its update scaled by LAYER_DECAY**i: deeper layers refine rather than
# rewrite, so a shallow draft built from the first layers agrees with the target often.
LAYER_DECAY = 0.2


@dataclass(frozen=True)
class Weights:
    """Every parameter array of a TinyModel (read-only once built)."""

    embedding: np.ndarray  # (V, W)
    encoder: tuple[np.ndarray, ...]  # q, k, v, o, ff_in, ff_out
    shared: tuple[np.ndarray, np.ndarray]  # source -> shared K, shared V
    layers: tuple[tuple[np.ndarray, ...], ...]  # per consumer: lq lk lv lo cq co ff_in ff_out
    head: np.ndarray  # (W, V)
    frequency: np.ndarray  # (W,) positional frequencies

    def arrays(self) -> list[np.ndarray]:
        return [
            self.embedding,
            *self.encoder,
            *self.shared,
            *(m for layer in self.layers for m in layer),
            self.head,
            self.frequency,
        ]


@dataclass(frozen=True)
class Fused:
    """Projections for the engine's forwards: one matmul where the maths has several, with the
    query scale and each layer's decay folded in (fewer NumPy calls; the rounding differs from
    `full_forward`'s by ~1e-16, far inside the oracle tolerance)."""

    encoder_qkv: np.ndarray  # (W, 3W): query (scaled) | key | value
    shared_kv: np.ndarray  # (W, 2W): shared key | shared value
    layer_in: list[np.ndarray]  # per layer (W, 4W): local q (scaled) | local k | local v | cross q
    layer_out: list[np.ndarray]  # per layer (2W, W): local out; cross out (decayed)
    feed_out: list[np.ndarray]  # per layer (W, W): feed-forward out (decayed)

    @classmethod
    def of(cls, weights: Weights, width: int) -> Fused:
        scale = 1.0 / math.sqrt(width)
        wq, wk, wv, *_ = weights.encoder
        decays = [LAYER_DECAY**index for index in range(len(weights.layers))]
        return cls(
            encoder_qkv=np.concatenate([wq * scale, wk, wv], axis=1),
            shared_kv=np.concatenate(weights.shared, axis=1),
            layer_in=[
                np.concatenate([m[0] * scale, m[1], m[2], m[4] * scale], axis=1)
                for m in weights.layers
            ],
            layer_out=[
                decay * np.concatenate([m[3], m[5]], axis=0)
                for decay, m in zip(decays, weights.layers)
            ],
            feed_out=[decay * m[7] for decay, m in zip(decays, weights.layers)],
        )


@dataclass
class State:
    """Committed state at a token boundary: what the oracle and the engine compare."""

    tokens: tuple[int, ...]
    encoder_keys: np.ndarray
    encoder_values: np.ndarray
    source: np.ndarray
    shared_keys: np.ndarray
    shared_values: np.ndarray
    local_keys: tuple[np.ndarray, ...]  # per layer, the last `window` rows
    local_values: tuple[np.ndarray, ...]
    logits: np.ndarray  # next-token logits after the last token

    def max_error(self, other: State) -> float:
        """Largest absolute difference between two states of the same tokens."""
        if not isinstance(other, State):
            raise ValueError(f"other must be a State, got {type(other).__name__}")
        if self.tokens != other.tokens:
            raise ValueError("states cover different token sequences")
        pairs = [
            (self.encoder_keys, other.encoder_keys),
            (self.encoder_values, other.encoder_values),
            (self.source, other.source),
            (self.shared_keys, other.shared_keys),
            (self.shared_values, other.shared_values),
            (self.logits, other.logits),
            *zip(self.local_keys, other.local_keys),
            *zip(self.local_values, other.local_values),
        ]
        error = 0.0
        for left, right in pairs:
            if left.shape != right.shape:
                raise ValueError(f"state arrays differ in shape: {left.shape} vs {right.shape}")
            if left.size:
                error = max(error, float(np.max(np.abs(left - right))))
        return error
