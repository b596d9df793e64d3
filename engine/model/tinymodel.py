"""TinyModel: a random, untrained float64 transformer with paged-friendly per-position state.

Layout of one position's state (what the KV pool stores for it; `rows.Layout` names the columns):

* encoder K/V   - a causal encoder layer with global attention over all earlier positions;
* source        - the encoder's output row; shared K/V are projections of it;
* shared K/V    - read by every consumer layer through causal cross-attention;
* local K/V     - one pair per consumer layer, read through a sliding window of `window` rows;
* logits        - the next-token logits after this position.

Two forwards exist on purpose. `full_forward` recomputes a whole sequence from scratch (the
oracle uses it); `forward_rows` computes only new rows for a batch of requests against stored
state, with a tree mask, and is what the engine runs (`batched.py`, made fast by `fastpaths/`).
They must agree within 1e-10.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ..rows import BatchContext, Layout, RowBatchItem, Rows
from . import fastpaths
from .batched import plain_context, plain_rows
from .checks import check_fits_in_memory, is_integer, is_number, positive_int
from .layers import feed_forward, rms_norm, softmax_attend
from .weights import LAYER_DECAY, Fused, State, Weights

RECOVERY_MODES = ("exact", "mask", "compact")
# Positions enter through sinusoids of random frequencies; fast ones keep generations varied.
POSITION_SCALE = 1.5


def _check_weights_fit(vocab_size: int, width: int, depth: int) -> None:
    floats = 2 * vocab_size * width + (8 + 8 * depth) * width * width + width
    check_fits_in_memory(
        2 * 8 * floats,  # the weights and the fused copies the forwards use
        f"a model of vocab_size {vocab_size}, width {width} and depth {depth} needs {{size}} "
        "for its weights",
    )


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
        _check_weights_fit(self.vocab_size, self.width, self.depth)
        if not is_integer(seed) or seed < 0:
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
        self._work = fastpaths.WorkBuffers()  # the fast paths' arrays, reused across calls

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
        self.layout = Layout(self.width, self.depth, self.vocab_size)
        self.fused = Fused.of(weights, self.width)

    def is_early_exit_of(self, other: TinyModel) -> bool:
        """True when this model is `other`'s first layers (any head): its rows for a position
        then equal `other`'s, so it can read `other`'s stored KV."""
        if (self.vocab_size, self.width, self.window) != (
            other.vocab_size,
            other.width,
            other.window,
        ) or self.depth > other.depth:
            return False
        mine, theirs = self.weights, other.weights
        pairs = [
            (mine.embedding, theirs.embedding),
            (mine.frequency, theirs.frequency),
            *zip(mine.encoder, theirs.encoder),
            *zip(mine.shared, theirs.shared),
            *(pair for a, b in zip(mine.layers, theirs.layers[: self.depth]) for pair in zip(a, b)),
        ]
        return all(x is y or np.array_equal(x, y) for x, y in pairs)

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
        ndim = tokens.ndim if isinstance(tokens, np.ndarray) else 1
        if not isinstance(tokens, (list, tuple, range, np.ndarray)) or ndim != 1:
            got = f"a {ndim}-d array" if ndim != 1 else type(tokens).__name__
            raise ValueError(
                f"{what} must be a sequence (list, tuple or 1-d array) of token ids, got {got}"
            )
        values = list(tokens)
        if not values:
            raise ValueError(f"{what} must not be empty")
        for index, token in enumerate(values):
            if not is_integer(token):
                raise ValueError(f"{what}[{index}] = {token!r} is not an integer token id")
            if not 0 <= token < self.vocab_size:
                raise ValueError(
                    f"{what}[{index}] = {token} is outside the vocabulary [0, {self.vocab_size})"
                )
        return tuple(int(t) for t in values)

    def check_eos_id(self, eos_id: object) -> int | None:
        """`eos_id` if it is None or a token id of this vocabulary; else a ValueError."""
        if eos_id is None:
            return None
        if not is_integer(eos_id) or not 0 <= eos_id < self.vocab_size:
            raise ValueError(
                f"eos_id must be None or a token id in [0, {self.vocab_size}), got {eos_id!r}"
            )
        return int(eos_id)

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
        x = x + softmax_attend(h @ wq, enc_k, enc_v, causal) @ wo
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
            attended = softmax_attend(h @ lq, loc_k[index], loc_v[index], local) @ lo
            attended += softmax_attend(h @ cq, sh_k, sh_v, causal) @ co
            scale = LAYER_DECAY**index
            x = x + scale * attended
            x = x + scale * feed_forward(x, g_in, g_out)
        logits = rms_norm(x) @ w.head
        if mode == "compact":
            loc_k[:, ~live] = 0.0
            loc_v[:, ~live] = 0.0
            logits[~live] = 0.0
        layout = self.layout
        data = np.empty((n, layout.size))
        data[:, layout.encoder_keys] = enc_k
        data[:, layout.encoder_values] = enc_v
        data[:, layout.shared_keys] = sh_k
        data[:, layout.shared_values] = sh_v
        data[:, layout.source] = source
        for index in range(self.depth):
            data[:, layout.local_keys(index)] = loc_k[index]
            data[:, layout.local_values(index)] = loc_v[index]
        data[:, layout.logits] = logits
        return Rows(data, layout)

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

    def forward_rows(
        self,
        batch: list[RowBatchItem],
        context: BatchContext | None = None,
        *,
        fast_paths: bool = True,
    ) -> list[Rows]:
        """One counted forward call (the engine makes one per round for the target)."""
        self.forward_calls += 1
        self._work.start_forward()
        return self.compute_rows(batch, context, fast_paths=fast_paths)

    def compute_rows(
        self,
        batch: list[RowBatchItem],
        context: BatchContext | None = None,
        *,
        fast_paths: bool = True,
    ) -> list[Rows]:
        """The new rows of every item, tree-masked, against its stored rows (or `context`,
        padded by `batch_context`). `fast_paths=False`: by the plain forward alone."""
        if not fast_paths:
            return plain_rows(self, batch, context)
        return fastpaths.compute_rows(self, self._work, batch, context)

    def batch_context(
        self,
        batch: list[RowBatchItem],
        tail: int = 0,
        scratch: str = "globals",
        local_room: bool = True,
        *,
        fast_paths: bool = True,
    ) -> BatchContext:
        """Pad the stored rows of a batch once (for several calls of a round); a single item
        is used without copying. `tail` rows of room follow the stored ones (for the window
        rows too unless `local_room` is False), in work buffer `scratch`. `fast_paths=False`:
        fresh copies, no room, nothing kept."""
        if not fast_paths:
            return plain_context(self, batch)
        return fastpaths.batch_context(self, self._work, batch, tail, scratch, local_room)

    def reset_scratch(self) -> None:
        """Forget the work buffers (after a failed or non-finite forward: masked padding is
        added to, so a NaN left in a buffer would leak into later, healthy batches)."""
        self._work.clear()


def make_draft(
    target: TinyModel, *, depth: int = 1, noise: float = 0.1, seed: int = 0
) -> TinyModel:
    """A self-speculative draft: the target's first `depth` layers with a perturbed exit head.

    The shared layers are the target's own arrays, so the draft's rows for committed positions
    equal the target's and the engine lets the draft read the target's KV instead of keeping
    its own. `noise` perturbs the exit head (relative to its spread): acceptance falls as it
    grows. Any other TinyModel (e.g. an independent seed) also works as a draft.
    """
    if not isinstance(target, TinyModel):
        raise ValueError(f"target must be a TinyModel, got {type(target).__name__}")
    depth = positive_int(depth, "depth")
    if depth > target.depth:
        raise ValueError(f"draft depth {depth} exceeds the target's depth {target.depth}")
    if not is_number(noise) or not np.isfinite(noise):
        raise ValueError(f"noise must be a finite number, got {noise!r}")
    if noise < 0:
        raise ValueError(f"noise must be non-negative, got {noise!r}")
    noise = float(noise)  # a NumPy float32 would lower the head's precision
    if not is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    draft = TinyModel(
        vocab_size=target.vocab_size,
        width=target.width,
        depth=depth,
        window=target.window,
        seed=seed,
    )
    rng = np.random.default_rng(seed)
    source = target.weights
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below
        head = source.head + noise * float(np.std(source.head)) * rng.standard_normal(
            source.head.shape
        )
        # A logit is a dot product of a unit-RMS row (L2 norm <= sqrt(width)) with a column
        # of the head; twice the bound must be finite too, as softmax subtracts logits.
        bound = 2.0 * math.sqrt(target.width) * np.abs(head).sum(axis=0).max()
    if not np.isfinite(bound):
        raise ValueError(
            f"noise {noise!r} is too large: the draft's perturbed head could give non-finite logits"
        )
    draft.weights = Weights(
        embedding=source.embedding,
        encoder=source.encoder,
        shared=source.shared,
        layers=source.layers[:depth],
        head=head,
        frequency=source.frequency,
    )
    return draft
