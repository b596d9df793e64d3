"""The arithmetic both forwards share: norms, feed-forwards and masked softmax attention."""

from __future__ import annotations

import numpy as np

NEG = -1e300  # masked score; finite so that fully masked rows give zero weights, not NaN
FAR = -(10**12)  # a position no window reaches (padding rows of a local window)
# Planes of `Layout.globals` (see `rows.planes`): keys, then values, of each global attention.
ENCODER_PLANE, SHARED_PLANE = 0, 2


def rms_norm(x: np.ndarray) -> np.ndarray:
    # sum / n is what np.mean computes, without its Python-level overhead (a hot call).
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + 1e-6)


def feed_forward(x: np.ndarray, w_in: np.ndarray, w_out: np.ndarray) -> np.ndarray:
    return np.tanh(rms_norm(x) @ w_in) @ w_out


def softmax_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The oracle's attention: boolean mask, unscaled queries, a row that sees nothing gets 0."""
    scores = np.where(mask, (q @ k.swapaxes(-1, -2)) / np.sqrt(q.shape[-1]), NEG)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.where(mask, np.exp(scores), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return (weights / np.where(total > 0, total, 1.0)) @ v


def mask_bias(visible: np.ndarray) -> np.ndarray:
    """A boolean mask as an additive bias: 0 where visible, NEG elsewhere."""
    return np.where(visible, 0.0, NEG)


def attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Softmax attention with an additive mask; `q` is already scaled."""
    scores = q @ keys.swapaxes(-1, -2)
    scores += bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    return (scores @ values) / scores.sum(axis=-1, keepdims=True)
