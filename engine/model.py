"""TinyModel: a random, untrained float64 transformer with paged-friendly per-position state.

Layout of one position's state (what the KV pool stores for it):

* encoder K/V   - a causal encoder layer with global attention over all earlier positions;
* source        - the encoder's output row; shared K/V are projections of it;
* shared K/V    - read by every consumer layer through causal cross-attention;
* local K/V     - one pair per consumer layer, read through a sliding window of `window` rows;
* logits        - the next-token logits after this position.

Two forwards exist on purpose. `full_forward` recomputes a whole sequence from scratch (the
oracle uses it); `forward_rows` computes only new rows for a batch of requests against stored
state, with a tree mask, and is what the engine runs. They must agree within 1e-10.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

RECOVERY_MODES = ("exact", "mask", "compact")
_NEG = -1e300  # masked score; finite so that fully masked rows give zero weights, not NaN
# Consumer layer i adds its update scaled by LAYER_DECAY**i: deeper layers refine rather than
# rewrite, so a shallow draft built from the first layers agrees with the target often.
LAYER_DECAY = 0.5
# Positions enter through sinusoids of random frequencies; fast ones keep generations varied.
POSITION_SCALE = 1.5


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def rms_norm(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def feed_forward(x: np.ndarray, w_in: np.ndarray, w_out: np.ndarray) -> np.ndarray:
    return np.tanh(rms_norm(x) @ w_in) @ w_out


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


@dataclass
class Rows:
    """Per-position arrays for a set of rows (from the pool, a forward, or the oracle)."""

    encoder_keys: np.ndarray  # (..., n, W)
    encoder_values: np.ndarray
    source: np.ndarray
    shared_keys: np.ndarray
    shared_values: np.ndarray
    local_keys: np.ndarray  # (..., depth, n, W)
    local_values: np.ndarray
    logits: np.ndarray  # (..., n, V)


@dataclass
class RowBatchItem:
    """One request's part of a batched `forward_rows` call.

    New rows come in order: `replay` rows first (positions whose encoder state is already in the
    context; only the consumers run), then full rows. `parents[i]` is the index of row i's parent
    among (earlier-round rows + new rows), or -1 when it hangs off the stored context directly.
    """

    context: (
        Rows  # stored rows: encoder/shared for [0, encoder_length); local for `local_positions`
    )
    encoder_length: int
    local_positions: np.ndarray  # positions of the stored local rows given in context.local_*
    tokens: np.ndarray  # tokens of all new rows (replay rows included, for bookkeeping)
    positions: np.ndarray
    parents: np.ndarray
    replay: int = 0  # how many leading new rows are replay rows
    local_lower: int = 0  # bounded recovery: local attention never sees positions below this
    consumer_from: int = 0  # compact recovery: consumers skip rows below this position
    earlier: Rows | None = None  # rows computed by an earlier call this round (draft levels)
    earlier_positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    earlier_parents: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    earlier_full: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


class TinyModel:
    """Single-head float64 model with fixed random weights. Not trained; outputs are token ids."""

    def __init__(
        self,
        *,
        vocab_size: int = 32,
        width: int = 16,
        depth: int = 3,
        window: int = 4,
        seed: int = 0,
    ) -> None:
        self.vocab_size = positive_int(vocab_size, "vocab_size")
        self.width = positive_int(width, "width")
        self.depth = positive_int(depth, "depth")
        self.window = positive_int(window, "window")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        rng = np.random.default_rng(self.seed)
        w = self.width

        def square() -> np.ndarray:
            return rng.normal(0.0, 1.0 / np.sqrt(w), (w, w))

        self.weights = Weights(
            embedding=rng.normal(0.0, 1.0, (self.vocab_size, w)),
            encoder=tuple(square() for _ in range(6)),
            shared=(square(), square()),
            layers=tuple(tuple(square() for _ in range(8)) for _ in range(self.depth)),
            head=rng.normal(0.0, 1.5 / np.sqrt(w), (w, self.vocab_size)),
            frequency=rng.uniform(0.3, 3.0, w),
        )
        self.forward_calls = 0  # counts forward_rows calls (the engine batches one per round)

    # -- parameters and identity -------------------------------------------------------------

    @property
    def weights(self) -> Weights:
        return self._weights

    @weights.setter
    def weights(self, weights: Weights) -> None:
        for array in weights.arrays():
            array.setflags(write=False)
        self._weights = weights
        self._identity: str | None = None

    @property
    def identity(self) -> str:
        """Fingerprint of layout and current parameters: cached state is keyed by it."""
        if self._identity is None:
            digest = hashlib.sha256(
                f"tinymodel-v1:{self.vocab_size}:{self.width}:{self.depth}:{self.window}".encode()
            )
            for array in self.weights.arrays():
                digest.update(f"{array.dtype.str}{array.shape}".encode())
                digest.update(np.ascontiguousarray(array).tobytes())
            self._identity = digest.hexdigest()[:16]
        return self._identity

    def check_tokens(self, tokens: object, what: str = "tokens") -> tuple[int, ...]:
        if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
            raise ValueError(f"{what} must be a sequence of token ids, got {tokens!r}")
        values = list(tokens)  # type: ignore[call-overload]
        if not values:
            raise ValueError(f"{what} must not be empty")
        for index, token in enumerate(values):
            if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
                raise ValueError(f"{what}[{index}] = {token!r} is not an integer token id")
            if not 0 <= token < self.vocab_size:
                raise ValueError(
                    f"{what}[{index}] = {token} is outside the vocabulary [0, {self.vocab_size})"
                )
        return tuple(int(t) for t in values)

    def embed(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        angles = positions[..., None] * self.weights.frequency
        return self.weights.embedding[tokens] + POSITION_SCALE * np.sin(angles)

    # -- the oracle's forward: whole sequence, no cache --------------------------------------

    def full_forward(self, tokens: tuple[int, ...], *, mode: str = "exact", keep: int = 0) -> Rows:
        """Recompute every position of `tokens` from scratch (bounded modes: see engine docs)."""
        tokens = self.check_tokens(tokens)
        if mode not in RECOVERY_MODES:
            raise ValueError(f"unknown recovery mode {mode!r}; use one of {RECOVERY_MODES}")
        n = len(tokens)
        positions = np.arange(n)
        lower = 0 if mode == "exact" else max(0, n - keep)
        w = self.weights
        x = self.embed(np.array(tokens), positions)
        wq, wk, wv, wo, f_in, f_out = w.encoder
        h = rms_norm(x)
        enc_k, enc_v = h @ wk, h @ wv
        causal = positions[None, :] <= positions[:, None]
        x = x + _softmax_attend(h @ wq, enc_k, enc_v, causal) @ wo
        source = x + feed_forward(x, f_in, f_out)
        sh_k, sh_v = source @ w.shared[0], source @ w.shared[1]
        local = causal & (positions[None, :] > positions[:, None] - self.window)
        local &= positions[None, :] >= lower
        live = positions >= (lower if mode == "compact" else 0)
        x = source.copy()
        loc_k = np.zeros((self.depth, n, self.width))
        loc_v = np.zeros((self.depth, n, self.width))
        for index, (lq, lk, lv, lo, cq, co, g_in, g_out) in enumerate(w.layers):
            h = rms_norm(x)
            loc_k[index], loc_v[index] = h @ lk, h @ lv
            attended = _softmax_attend(h @ lq, loc_k[index], loc_v[index], local) @ lo
            attended += _softmax_attend(h @ cq, sh_k, sh_v, causal) @ co
            scale = LAYER_DECAY**index
            x = x + scale * attended
            x = x + scale * feed_forward(x, g_in, g_out)
        logits = rms_norm(x) @ w.head
        if mode == "compact":
            loc_k[:, ~live] = 0.0
            loc_v[:, ~live] = 0.0
            logits[~live] = 0.0
        return Rows(enc_k, enc_v, source, sh_k, sh_v, loc_k, loc_v, logits)

    def state_of(self, tokens: tuple[int, ...], rows: Rows) -> State:
        """The committed `State` for a full sequence's rows."""
        start = max(0, len(tokens) - self.window)
        return State(
            tokens=tuple(tokens),
            encoder_keys=rows.encoder_keys.copy(),
            encoder_values=rows.encoder_values.copy(),
            source=rows.source.copy(),
            shared_keys=rows.shared_keys.copy(),
            shared_values=rows.shared_values.copy(),
            local_keys=tuple(rows.local_keys[i, start:].copy() for i in range(self.depth)),
            local_values=tuple(rows.local_values[i, start:].copy() for i in range(self.depth)),
            logits=rows.logits[-1].copy(),
        )

    # -- the engine's forward: new rows of many requests against stored state ----------------

    def forward_rows(self, batch: list[RowBatchItem]) -> list[Rows]:
        """One counted forward call (the engine makes one per round for the target)."""
        self.forward_calls += 1
        return self.compute_rows(batch)

    def compute_rows(self, batch: list[RowBatchItem]) -> list[Rows]:
        """Compute the new rows of every item in one vectorised, tree-masked pass.

        Each new row attends to the stored context plus its own ancestors (and itself) among
        this round's rows, under each attention's rule: global causal encoder, causal
        cross-attention over shared K/V, and a sliding local window.
        """
        if not batch:
            return []
        w = self.weights
        size = len(batch)
        width, depth = self.width, self.depth
        new_counts = [len(item.tokens) for item in batch]
        q_max = max(new_counts)
        e_counts = [len(item.earlier_positions) + n for item, n in zip(batch, new_counts)]
        e_max = max(e_counts)
        c_max = max(item.encoder_length for item in batch)
        l_max = max(len(item.local_positions) for item in batch)

        # Query rows, padded. Padding rows are valid-but-ignored: they see nothing.
        tokens = np.zeros((size, q_max), dtype=np.int64)
        positions = np.zeros((size, q_max), dtype=np.int64)
        q_valid = np.zeros((size, q_max), dtype=bool)
        q_full = np.zeros((size, q_max), dtype=bool)
        q_consumer = np.zeros((size, q_max), dtype=bool)
        # Extras: earlier rows of this round followed by the new rows.
        e_pos = np.full((size, e_max), -1, dtype=np.int64)
        e_full = np.zeros((size, e_max), dtype=bool)
        ancestor = np.zeros((size, q_max, e_max), dtype=bool)
        lower = np.zeros((size, 1, 1), dtype=np.int64)
        c_len = np.zeros((size, 1, 1), dtype=np.int64)
        ctx = {
            name: np.zeros((size, c_max, width))
            for name in ("encoder_keys", "encoder_values", "shared_keys", "shared_values")
        }
        l_pos = np.full((size, l_max), -(10**12), dtype=np.int64)
        l_keys = np.zeros((size, depth, l_max, width))
        l_values = np.zeros((size, depth, l_max, width))
        earlier_enc_k = np.zeros((size, e_max, width))
        earlier_enc_v = np.zeros((size, e_max, width))
        earlier_sh_k = np.zeros((size, e_max, width))
        earlier_sh_v = np.zeros((size, e_max, width))
        earlier_loc_k = np.zeros((size, depth, e_max, width))
        earlier_loc_v = np.zeros((size, depth, e_max, width))
        source = np.zeros((size, q_max, width))
        for b, item in enumerate(batch):
            n = new_counts[b]
            m = len(item.earlier_positions)
            tokens[b, :n] = item.tokens
            positions[b, :n] = item.positions
            q_valid[b, :n] = True
            q_full[b, item.replay : n] = True
            q_consumer[b, :n] = item.positions >= item.consumer_from
            e_pos[b, :m] = item.earlier_positions
            e_pos[b, m : m + n] = item.positions
            e_full[b, :m] = item.earlier_full
            e_full[b, m : m + n] = q_full[b, :n]
            parents = np.concatenate([item.earlier_parents, item.parents]).astype(np.int64)
            ancestor[b, :n, : m + n] = _ancestor_matrix(parents)[m:]
            lower[b] = item.local_lower
            c_len[b] = item.encoder_length
            c = item.encoder_length
            context = item.context
            ctx["encoder_keys"][b, :c] = context.encoder_keys[:c]
            ctx["encoder_values"][b, :c] = context.encoder_values[:c]
            ctx["shared_keys"][b, :c] = context.shared_keys[:c]
            ctx["shared_values"][b, :c] = context.shared_values[:c]
            k = len(item.local_positions)
            l_pos[b, :k] = item.local_positions
            l_keys[b, :, :k] = context.local_keys
            l_values[b, :, :k] = context.local_values
            if item.replay:
                source[b, : item.replay] = context.source[item.positions[: item.replay]]
            if m:
                earlier = item.earlier
                assert earlier is not None
                earlier_enc_k[b, :m] = earlier.encoder_keys
                earlier_enc_v[b, :m] = earlier.encoder_values
                earlier_sh_k[b, :m] = earlier.shared_keys
                earlier_sh_v[b, :m] = earlier.shared_values
                earlier_loc_k[b, :, :m] = earlier.local_keys
                earlier_loc_v[b, :, :m] = earlier.local_values

        qpos = positions[:, :, None]
        c_range = np.arange(c_max)[None, None, :]
        # Global rules (encoder and cross-attention): stored rows at or before the query.
        ctx_causal = (c_range < c_len) & (c_range <= qpos) & q_valid[:, :, None]
        ext_full = ancestor & e_full[:, None, :]
        in_window = qpos - self.window
        ctx_local = (l_pos[:, None, :] > in_window) & (l_pos[:, None, :] >= lower)
        ctx_local &= (l_pos[:, None, :] <= qpos) & q_valid[:, :, None]
        ext_local = ancestor & (e_pos[:, None, :] > in_window) & (e_pos[:, None, :] >= lower)

        # Encoder over full rows.
        wq, wk, wv, wo, f_in, f_out = w.encoder
        x = self.embed(tokens, positions)
        h = rms_norm(x)
        enc_k, enc_v = h @ wk, h @ wv
        m_slice = [len(item.earlier_positions) for item in batch]
        ext_enc_k, ext_enc_v = earlier_enc_k, earlier_enc_v
        for b, m in enumerate(m_slice):
            ext_enc_k[b, m : m + new_counts[b]] = enc_k[b, : new_counts[b]]
            ext_enc_v[b, m : m + new_counts[b]] = enc_v[b, : new_counts[b]]
        enc_mask = ctx_causal & q_full[:, :, None]
        attended = _two_part_attend(
            h @ wq,
            (ctx["encoder_keys"], ctx["encoder_values"], enc_mask),
            (ext_enc_k, ext_enc_v, ext_full & q_full[:, :, None]),
        )
        x = x + attended @ wo
        encoded = x + feed_forward(x, f_in, f_out)
        source = np.where(q_full[:, :, None], encoded, source)
        sh_k, sh_v = source @ w.shared[0], source @ w.shared[1]
        ext_sh_k, ext_sh_v = earlier_sh_k, earlier_sh_v
        for b, m in enumerate(m_slice):
            ext_sh_k[b, m : m + new_counts[b]] = sh_k[b, : new_counts[b]]
            ext_sh_v[b, m : m + new_counts[b]] = sh_v[b, : new_counts[b]]

        # Consumers: local window + cross-attention.
        x = source
        loc_k = np.zeros((size, depth, q_max, width))
        loc_v = np.zeros((size, depth, q_max, width))
        cross_ctx = (ctx["shared_keys"], ctx["shared_values"], ctx_causal)
        for index, (lq, lk, lv, lo, cq, co, g_in, g_out) in enumerate(w.layers):
            h = rms_norm(x)
            k_new, v_new = h @ lk, h @ lv
            loc_k[:, index], loc_v[:, index] = k_new, v_new
            ext_k, ext_v = earlier_loc_k[:, index], earlier_loc_v[:, index]
            for b, m in enumerate(m_slice):
                ext_k[b, m : m + new_counts[b]] = k_new[b, : new_counts[b]]
                ext_v[b, m : m + new_counts[b]] = v_new[b, : new_counts[b]]
            local = _two_part_attend(
                h @ lq,
                (l_keys[:, index], l_values[:, index], ctx_local),
                (ext_k, ext_v, ext_local),
            )
            cross = _two_part_attend(
                h @ cq, cross_ctx, (ext_sh_k, ext_sh_v, ext_full & q_valid[:, :, None])
            )
            scale = LAYER_DECAY**index
            x = x + scale * (local @ lo + cross @ co)
            x = x + scale * feed_forward(x, g_in, g_out)
        logits = rms_norm(x) @ w.head

        skipped = q_valid & ~q_consumer
        if skipped.any():
            loc_k[:, :, :][np.broadcast_to(skipped[:, None, :], loc_k.shape[:3])] = 0.0
            loc_v[:, :, :][np.broadcast_to(skipped[:, None, :], loc_v.shape[:3])] = 0.0
            logits[skipped] = 0.0
        results = []
        for b, n in enumerate(new_counts):
            results.append(
                Rows(
                    enc_k[b, :n],
                    enc_v[b, :n],
                    source[b, :n],
                    sh_k[b, :n],
                    sh_v[b, :n],
                    loc_k[b, :, :n],
                    loc_v[b, :, :n],
                    logits[b, :n],
                )
            )
        return results


def _softmax_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    scores = np.where(mask, (q @ k.swapaxes(-1, -2)) / np.sqrt(q.shape[-1]), _NEG)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.where(mask, np.exp(scores), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return (weights / np.where(total > 0, total, 1.0)) @ v


def _two_part_attend(
    q: np.ndarray,
    first: tuple[np.ndarray, np.ndarray, np.ndarray],
    second: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Softmax attention over the union of two key sets, without concatenating them."""
    scale = 1.0 / np.sqrt(q.shape[-1])
    k1, v1, m1 = first
    k2, v2, m2 = second
    s1 = np.where(m1, (q @ k1.swapaxes(-1, -2)) * scale, _NEG)
    s2 = np.where(m2, (q @ k2.swapaxes(-1, -2)) * scale, _NEG)
    top = np.maximum(
        s1.max(axis=-1, keepdims=True, initial=_NEG), s2.max(axis=-1, keepdims=True, initial=_NEG)
    )
    w1 = np.where(m1, np.exp(s1 - top), 0.0)
    w2 = np.where(m2, np.exp(s2 - top), 0.0)
    total = w1.sum(axis=-1, keepdims=True) + w2.sum(axis=-1, keepdims=True)
    total = np.where(total > 0, total, 1.0)
    return (w1 @ v1 + w2 @ v2) / total


def _ancestor_matrix(parents: np.ndarray) -> np.ndarray:
    """a[i, j] is True when row j is row i itself or one of its ancestors."""
    n = len(parents)
    result = np.eye(n, dtype=bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            if parent >= i:
                raise ValueError("a row's parent must come before it")
            result[i] |= result[parent]
    return result


def make_draft(
    target: TinyModel, *, depth: int = 1, noise: float = 0.1, seed: int = 0
) -> TinyModel:
    """A cheaper model that often agrees with `target`: its first `depth` layers, perturbed.

    `noise` scales Gaussian perturbations relative to each matrix's own spread, so acceptance
    falls as noise grows; a large noise gives an essentially independent draft.
    """
    depth = positive_int(depth, "depth")
    if depth > target.depth:
        raise ValueError(f"draft depth {depth} exceeds the target's depth {target.depth}")
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be finite and non-negative, got {noise!r}")
    draft = TinyModel(
        vocab_size=target.vocab_size,
        width=target.width,
        depth=depth,
        window=target.window,
        seed=seed,
    )
    rng = np.random.default_rng(seed)

    def perturb(array: np.ndarray) -> np.ndarray:
        return array + noise * float(np.std(array)) * rng.standard_normal(array.shape)

    source = target.weights
    draft.weights = Weights(
        embedding=perturb(source.embedding),
        encoder=tuple(perturb(m) for m in source.encoder),
        shared=(perturb(source.shared[0]), perturb(source.shared[1])),
        layers=tuple(tuple(perturb(m) for m in layer) for layer in source.layers[:depth]),
        head=perturb(source.head),
        frequency=source.frequency,
    )
    return draft
