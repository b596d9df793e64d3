"""TinyModel: a random, untrained float64 transformer with paged-friendly per-position state.

Layout of one position's state (what the KV pool stores for it; `rows.Layout` names the columns):

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
import math
import os
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeGuard

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .rows import BatchContext, BatchRows, Joined, Layout, RowBatchItem, Rows, Stored, planes

RECOVERY_MODES = ("exact", "mask", "compact")
_NEG = -1e300  # masked score; finite so that fully masked rows give zero weights, not NaN
# Consumer layer i adds its update scaled by LAYER_DECAY**i: deeper layers refine rather than
# rewrite, so a shallow draft built from the first layers agrees with the target often.
LAYER_DECAY = 0.2
# Positions enter through sinusoids of random frequencies; fast ones keep generations varied.
POSITION_SCALE = 1.5


def physical_memory() -> int | None:
    """Bytes of memory this machine has, where the system says (POSIX); else None."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_in_memory(needed: int, what: str, hint: str = "") -> None:
    """Refuse `needed` bytes beyond the machine's memory, as a ValueError that starts with
    `what`, its `{size}` filled in ("a pool of 1024 positions needs {size} for its rows").
    Arrays made and written piece by piece are, with overcommitted memory, not a MemoryError
    but a process the system kills."""
    memory = physical_memory()
    if memory is not None and needed > memory:
        size = f"{needed / 2**30:.3g} GiB"
        raise ValueError(
            f"{what.format(size=size)}, more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory{hint}"
        )


def _check_weights_fit(vocab_size: int, width: int, depth: int) -> None:
    floats = 2 * vocab_size * width + (8 + 8 * depth) * width * width + width
    check_fits_in_memory(
        2 * 8 * floats,  # the weights and the fused copies the forwards use
        f"a model of vocab_size {vocab_size}, width {width} and depth {depth} needs {{size}} "
        "for its weights",
    )


def is_integer(value: object) -> TypeGuard[int | np.integer]:
    """An int or a NumPy integer, not a bool (True is an int to Python)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float | np.integer | np.floating]:
    """A real number, Python's or NumPy's, not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def positive_int(value: object, name: str) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def rms_norm(x: np.ndarray) -> np.ndarray:
    # sum / n is what np.mean computes, without its Python-level overhead (a hot call).
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + 1e-6)


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


class _ChainAttention:
    """Global attention for a chain batch (see `TinyModel._chain_rows`): each query sees the
    stored rows plus the chain's rows up to itself.

    A single item reads its stored rows in place (no padding copy) with 2-D products, which
    take the strided planes as they are; a padded batch writes the chain into the context's
    tail, after the padding, and masks the padding.
    """

    def __init__(
        self,
        context: BatchContext,
        out: np.ndarray,
        earlier: np.ndarray | None,
        k: int,
        width: int,
    ) -> None:
        self.out, self.k, self.width = out, k, width
        self.written: set[int] = set()  # planes whose new rows are in place
        size, q, _ = out.shape
        self.q, self.chain = q, k + q
        # Query i (chain row k + i) sees chain rows 0..k + i.
        self.causal = np.arange(self.chain)[None, :] <= (k + np.arange(q))[:, None]
        globals_width = 4 * width
        self.merged = context.merged
        if not self.merged:
            self.stored = context.globals[0]  # (4, C, W): views into the pool if contiguous
            self.tail = np.empty((4, self.chain, width))
            if earlier is not None:
                self.tail[:, :k] = planes(earlier[0, :, :globals_width], width)
            self.chain_bias = _bias(self.causal)
            return
        context.reserve(self.chain)
        self.padded, c = context.globals, context.stored
        self.stored_rows = c  # padded: the chain's rows follow the stored ones
        self.span = c + self.chain
        if earlier is not None:
            self.padded[:, :, c : c + k] = planes(earlier[..., :globals_width], width)
        # Only `batch_context` pads, and it makes the stored rows' mask once for the round.
        assert context.stored_bias is not None
        self.bias = np.empty((size, q, self.span))
        self.bias[..., :c] = context.stored_bias[:, None, :]
        self.bias[..., c:] = _bias(self.causal)

    def attend(self, queries: np.ndarray, plane: int) -> np.ndarray:
        """Attention of (B, q, W) queries over key plane `plane` and value plane `plane + 1`,
        once the new rows' keys and values are in `out`."""
        width, k = self.width, self.k
        if plane not in self.written:  # every consumer layer reads the same shared planes
            self.written.add(plane)
            new = planes(self.out[..., plane * width : (plane + 2) * width], width)  # (B, 2, q, W)
            if self.merged:
                self.padded[:, plane : plane + 2, self.stored_rows + k : self.span] = new
            else:
                self.tail[plane : plane + 2, k:] = new[0]
        if self.merged:
            keys = self.padded[:, plane, : self.span]
            values = self.padded[:, plane + 1, : self.span]
            few = self.q <= CAUSAL_BLOCK_ROWS or len(queries) * self.q < CAUSAL_BLOCK_MIN_QUERIES
            if few or self.stored_rows > self.chain:
                return _attend(queries, keys, values, self.bias)
            # A long chain (a prefill) in blocks of queries, each over the keys up to its last
            # row: the later chain rows are masked for it anyway (a quarter less work at 2).
            out = np.empty_like(queries)
            for low in range(0, self.q, CAUSAL_BLOCK_ROWS):
                high = min(self.q, low + CAUSAL_BLOCK_ROWS)
                reach = self.stored_rows + k + high
                out[:, low:high] = _attend(
                    queries[:, low:high],
                    keys[:, :reach],
                    values[:, :reach],
                    self.bias[:, low:high, :reach],
                )
            return out
        stored, tail = self.stored, self.tail
        # 2-D products: the stored planes are read in place, whatever their strides.
        mixed = _attend_two(
            queries.reshape(self.q, width),
            (stored[plane], stored[plane + 1], None),
            (tail[plane], tail[plane + 1], self.chain_bias),
        )
        return mixed.reshape(1, self.q, width)


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
        self._buffers: dict[str, np.ndarray] = {}
        # Per padded buffer: batch slot -> (context key, rows of it the slot holds).
        self._filled: dict[str, dict[int, tuple[Hashable, int]]] = {}
        # Per buffer: consecutive calls that used at most a quarter of it (see `_shrink`), and
        # the forward call that last used it (one unused for long is dropped).
        self._underused: dict[str, int] = {}
        self._used_at: dict[str, int] = {}
        self._group = ""  # the length group being computed: its buffers' name suffix

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
        # Fused projections for the engine's forwards: one matmul where the maths has several,
        # with the query scale and each layer's decay folded in (fewer NumPy calls; the
        # rounding differs from `full_forward`'s by ~1e-16, far inside the oracle tolerance).
        scale = 1.0 / math.sqrt(self.width)
        wq, wk, wv, *_ = weights.encoder
        self._encoder_qkv = np.concatenate([wq * scale, wk, wv], axis=1)
        self._shared_kv = np.concatenate(weights.shared, axis=1)
        self._layer_in = [
            np.concatenate([m[0] * scale, m[1], m[2], m[4] * scale], axis=1) for m in weights.layers
        ]
        decays = [LAYER_DECAY**index for index in range(self.depth)]
        self._layer_out = [
            decay * np.concatenate([m[3], m[5]], axis=0) for decay, m in zip(decays, weights.layers)
        ]
        self._feed_out = [decay * m[7] for decay, m in zip(decays, weights.layers)]

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
        self, batch: list[RowBatchItem], context: BatchContext | None = None
    ) -> list[Rows]:
        """One counted forward call (the engine makes one per round for the target)."""
        self.forward_calls += 1
        self._drop_idle_buffers()
        return self.compute_rows(batch, context)

    def _drop_idle_buffers(self) -> None:
        """Forget work buffers no forward used in the last SHRINK_AFTER: a long prefill's
        padded contexts are not read again once its request decodes on the chain path."""
        for name, used in list(self._used_at.items()):
            if self.forward_calls - used > SHRINK_AFTER:
                del self._used_at[name]
                self._buffers.pop(name, None)
                self._filled.pop(name, None)
                self._underused.pop(name, None)

    def _buffer_name(self, name: str) -> str:
        """The buffer (and kept-rows record) `name` means in the length group being computed:
        a buffer and its record must always be named alike."""
        return name + self._group

    def _scratch(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A reusable work array: a view of a buffer that grows on demand and shrinks after
        long underuse (`_shrink`). Rows a call does not write keep finite values from earlier
        calls; every read of them is masked. Reusing the memory avoids page-faulting fresh
        zeroed pages on every call."""
        name = self._buffer_name(name)
        self._used_at[name] = self.forward_calls
        buffer = self._buffers.get(name)
        fits = buffer is not None and all(have >= n for have, n in zip(buffer.shape, shape))
        if buffer is not None and fits and 4 * math.prod(shape) <= buffer.size:
            buffer = self._shrink(name, buffer, shape)
        else:
            self._underused.pop(name, None)
        if buffer is None or not fits:
            # Grow a short dimension to twice what is needed: a context gains rows every
            # round, and a fresh buffer costs page faults on first touch. The old contents
            # move along, so the padded rows `_padded_globals` keeps stay valid (no round has
            # to gather every history again).
            if buffer is None:
                grown = shape
            else:
                old = buffer.shape
                grown = tuple(have if have >= need else 2 * need for have, need in zip(old, shape))
            fresh = np.zeros(grown)
            if buffer is not None:
                fresh[tuple(slice(0, have) for have in old)] = buffer
            buffer = self._buffers[name] = fresh
        return buffer[tuple(slice(0, need) for need in shape)]

    def _shrink(self, name: str, buffer: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The buffer, or after SHRINK_AFTER calls in a row that used at most a quarter of
        it, a copy with room for twice what they need. One long request in a big batch grows
        the padded buffer to batch x its context; without this, that memory (hundreds of MB)
        stayed for the rest of the process. The wait keeps a batch whose sizes come and go
        from reallocating every round."""
        calls = self._underused[name] = self._underused.get(name, 0) + 1
        smaller = tuple(min(have, 2 * need) for have, need in zip(buffer.shape, shape))
        if calls < SHRINK_AFTER or 2 * math.prod(smaller) > buffer.size:
            return buffer
        del self._underused[name]
        fresh = np.zeros(smaller)
        fresh[...] = buffer[tuple(slice(0, n) for n in smaller)]
        # Padded rows kept for batch slots (dimension 0) over their first rows (dimension 2)
        # stay valid where the copy holds them.
        filled = self._filled.get(name)
        if filled is not None:
            slots, rows = smaller[0], smaller[2]
            for slot in [slot for slot in filled if slot >= slots]:
                del filled[slot]
            for slot, (key, count) in filled.items():
                filled[slot] = (key, min(count, rows))
        self._buffers[name] = fresh
        return fresh

    def reset_scratch(self) -> None:
        """Forget the work buffers (after a failed or non-finite forward: masked padding is
        added to, so a NaN left in a buffer would leak into later, healthy batches)."""
        self._buffers.clear()
        self._filled.clear()
        self._underused.clear()
        self._used_at.clear()

    def _padded_globals(self, name: str, batch: list[RowBatchItem], rows: int) -> np.ndarray:
        """(B, 4, rows, W) planes of every item's stored rows, in a reusable buffer.

        A slot that held the same `context_key` last time keeps those rows and copies only the
        new ones: in steady decoding a round copies one row per request, not whole histories.
        """
        width = self.width
        # Once histories are kept here, start with room for a few hundred rows: growing later
        # copies every history held (a visible pause in a live session).
        kept = any(item.encoder_length for item in batch)
        capacity = max(rows, PADDED_ROWS) if kept else rows
        padded = self._scratch(name, (len(batch), 4, capacity, width))[:, :, :rows]
        filled = self._filled.setdefault(self._buffer_name(name), {})
        # Steady decoding reads one new row per item: those are gathered in one operation.
        single_items: list[int] = []
        single_rows: list[int] = []
        single_slots: list[int] = []
        store = None
        for b, item in enumerate(batch):
            count, key = item.encoder_length, item.context_key
            start = 0
            held = filled.get(b)
            if key is not None and held is not None and held[0] == key:
                start = min(held[1], count)
            # Only rows below `count` are claimed: later ones may be overwritten as padding.
            filled[b] = (key, count)
            if start == count:
                continue
            context = item.context
            if isinstance(context, Stored):  # only the missing slots are read
                index = context.index
                if count - start == 1 and (store is None or context.store is store):
                    store = context.store
                    single_items.append(b)
                    single_rows.append(start)
                    single_slots.append(
                        index.start + start if isinstance(index, slice) else index[start]
                    )
                    continue
                if isinstance(index, slice):
                    index = slice(index.start + start, index.start + count)
                else:
                    index = index[start:count]
                padded[b, :, start:count] = context.store.planes[:, index]
            else:
                stored = context.columns(self.layout.globals)[start:count]
                padded[b, :, start:count] = planes(stored, width)
        if store is not None:
            gathered = store.planes[:, single_slots].swapaxes(0, 1)
            padded[single_items, :, single_rows] = gathered
        return padded

    def _context_planes(self, context: Rows | Stored | Joined) -> np.ndarray:
        """(4, C, W) planes of a context's stored rows (views for a run of pool slots)."""
        if isinstance(context, Stored):
            return context.planes()
        return planes(context.columns(self.layout.globals), self.width)

    def batch_context(
        self,
        batch: list[RowBatchItem],
        tail: int = 0,
        scratch: str = "globals",
        local_room: bool = True,
    ) -> BatchContext:
        """Pad the stored rows of a batch once; a single item is used without copying.
        `tail` rows of room follow the stored ones (for the window rows too unless
        `local_room` is False: the general path concatenates its own)."""
        layout = self.layout
        lengths = np.array([item.encoder_length for item in batch], dtype=np.int64)
        local_counts = [len(item.local_positions) for item in batch]
        lower = np.array([item.local_lower for item in batch], dtype=np.int64)
        consumer_from = np.array([item.consumer_from for item in batch], dtype=np.int64)
        if len(batch) == 1:
            item = batch[0]
            return BatchContext(
                self._context_planes(item.context)[None],
                lengths,
                item.local.columns(layout.local)[None],
                np.asarray(item.local_positions, dtype=np.int64)[None, :],
                lower,
                consumer_from,
                False,
                int(lengths[0]),
            )
        size = len(batch)
        c_max = int(lengths.max())
        l_max = max(local_counts)
        globals_ = self._padded_globals(scratch, batch, c_max + tail)
        # Padding rows keep whatever an earlier call left there: their positions mask them.
        rows = l_max + (tail if local_room else 0)
        room = self._scratch(scratch + " local", (size, rows, 2 * self.depth * self.width))
        local_positions = np.full((size, l_max), _FAR, dtype=np.int64)
        window_rows = _window_rows(batch, l_max) if l_max else None
        if window_rows is not None:  # every item holds l_max window rows: one gather
            store, slots = window_rows
            room[:, :l_max] = Stored(store, slots).columns(layout.local).reshape(size, l_max, -1)
        for b, item in enumerate(batch):
            count = local_counts[b]
            if count:
                if window_rows is None:
                    room[b, :count] = item.local.columns(layout.local)
                local_positions[b, :count] = item.local_positions
        ragged = bool((lengths < c_max).any())
        return BatchContext(
            globals_,
            lengths,
            room[:, :l_max],
            local_positions,
            lower,
            consumer_from,
            ragged,
            c_max,
            local_room=room,
            stored_bias=_bias(np.arange(c_max)[None, :] < lengths[:, None]),
        )

    def compute_rows(
        self, batch: list[RowBatchItem], context: BatchContext | None = None
    ) -> list[Rows]:
        """Compute the new rows of every item; long prefill chains go chunk by chunk, and
        items of very different lengths in groups of their own (see `length_groups`)."""
        groups = length_groups(batch) if context is None else [list(range(len(batch)))]
        if len(groups) == 1:
            return self._compute_group(batch, context)
        results: list[Rows | None] = [None] * len(batch)
        for members, suffix in zip(groups, _group_suffixes(batch, groups)):
            # Each group pads its contexts in buffers of its own: they keep their rows.
            self._group = suffix
            try:
                outputs = self._compute_group([batch[i] for i in members], None)
            finally:
                self._group = ""
            for i, rows in zip(members, outputs):
                results[i] = rows
        return results  # type: ignore[return-value]

    def _compute_group(self, batch: list[RowBatchItem], context: BatchContext | None) -> list[Rows]:
        shape = _chain_shape(batch)
        if shape is not None:
            return self._chain_rows(batch, shape, context)
        long = [
            i
            for i, item in enumerate(batch)
            if len(item.tokens) > PREFILL_CHUNK
            and item.earlier is None
            and np.array_equal(item.parents, np.arange(len(item.tokens)) - 1)
        ]
        if not long or context is not None:
            return self._compute_rows(batch, context)
        results: list[Rows | None] = [None] * len(batch)
        rest = [i for i in range(len(batch)) if i not in long]
        if rest:
            for i, rows in zip(rest, self._compute_group([batch[i] for i in rest], None)):
                results[i] = rows
        for i in long:
            results[i] = self._compute_chunked(batch[i])
        return results  # type: ignore[return-value]

    def _chain_rows(
        self, batch: list[RowBatchItem], shape: tuple[int, int], context: BatchContext | None
    ) -> list[Rows]:
        """The common rounds without the tree and scatter machinery of `_compute_rows`: every
        item adds `q` rows in a chain right after its stored rows and `k` rows computed
        earlier this round (a decode step, a draft level, a chain verification). Same maths
        (the oracle tests hold both paths to `full_forward`), far fewer NumPy calls.
        """
        k, q = shape
        w, layout, width = self.weights, self.layout, self.width
        size, rows = len(batch), len(batch) * q
        tokens = np.array([item.tokens for item in batch], dtype=np.int64).reshape(rows)
        positions = np.array([item.positions for item in batch], dtype=np.int64)
        earlier = np.array([item.earlier.data for item in batch]) if k else None  # type: ignore[union-attr]
        if context is None:
            context = self.batch_context(batch, tail=k + q, scratch="decode")
        # Dense parts run on (B·q, W) rows: one matrix product each, not one per item.
        flat = np.empty((rows, layout.size))
        chain = _ChainAttention(context, flat.reshape(size, q, layout.size), earlier, k, width)
        local, local_bias = self._chain_local(context, positions, earlier, chain.causal)

        def per_item(x: np.ndarray) -> np.ndarray:
            return x.reshape(size, q, x.shape[-1])

        wo, f_in, f_out = w.encoder[3:]
        x = self.embed(tokens, positions.reshape(rows))
        qkv = rms_norm(x) @ self._encoder_qkv
        flat[:, layout.encoder_keys.start : layout.encoder_values.stop] = qkv[:, width:]
        attended = chain.attend(per_item(qkv[:, :width]), ENCODER_PLANE)
        x = x + attended.reshape(rows, width) @ wo
        source = x + feed_forward(x, f_in, f_out)
        flat[:, layout.source] = source
        flat[:, layout.shared_keys.start : layout.shared_values.stop] = source @ self._shared_kv

        x = source
        own = local.shape[1] - q  # the chain's new rows come last in the local window
        for index, layer in enumerate(w.layers):
            projected = rms_norm(x) @ self._layer_in[index]  # local q | local k | local v | cross q
            pair = slice(layout.local_keys(index).start, layout.local_values(index).stop)
            flat[:, pair] = projected[:, width : 3 * width]
            start = 2 * index * width
            local[:, own:, start : start + 2 * width] = per_item(projected[:, width : 3 * width])
            local_out = _attend_window(
                per_item(projected[:, :width]),
                local[..., start : start + width],
                local[..., start + width : start + 2 * width],
                local_bias,
                k + q,
                self.window,
            )
            cross = chain.attend(per_item(projected[:, 3 * width :]), SHARED_PLANE)
            mixed = np.concatenate([local_out, cross], axis=-1).reshape(rows, 2 * width)
            x = x + mixed @ self._layer_out[index]
            x = x + feed_forward(x, layer[6], self._feed_out[index])
        flat[:, layout.logits] = rms_norm(x) @ w.head
        return BatchRows([Rows(flat[b * q : (b + 1) * q], layout) for b in range(size)], flat)

    def _chain_local(
        self,
        context: BatchContext,
        positions: np.ndarray,
        earlier: np.ndarray | None,
        causal: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Local-window keys for a chain batch: the stored window rows (padded), the earlier
        rows, then room for the new rows; and the mask by position (plus causality)."""
        size, q = positions.shape
        k = 0 if earlier is None else earlier.shape[1]
        l_max = context.local.shape[1]
        room = context.local_room
        if room is not None and room.shape[1] >= l_max + k + q:
            local = room[:, : l_max + k + q]  # the stored rows are already in place
        else:
            local = np.empty((size, l_max + k + q, context.local.shape[2]))
            local[:, :l_max] = context.local
        local_positions = np.empty((size, l_max + k + q), dtype=np.int64)
        local_positions[:, :l_max] = context.local_positions
        local_positions[:, l_max + k :] = positions
        if earlier is not None:
            local[:, l_max : l_max + k] = earlier[..., self.layout.local]
            local_positions[:, l_max : l_max + k] = positions[:, :1] - np.arange(k, 0, -1)
        visible = local_positions[:, None, :] > (positions - self.window)[:, :, None]
        visible[:, :, l_max:] &= causal
        return local, _bias(visible)

    def _compute_chunked(self, item: RowBatchItem) -> Rows:
        """A long chain in chunks: each attends to the stored rows plus the chunks before it,
        so memory stays O(chunk x context) instead of O(context^2)."""
        done: list[Rows] = []
        start = 0
        total = len(item.tokens)
        while start < total:
            stop = min(total, start + PREFILL_CHUNK)
            computed = Rows.concat(done) if done else Rows.empty(self.layout)
            full_done = max(0, len(computed) - item.replay)  # full rows extend the context
            context = (
                item.context
                if not full_done
                else Joined(item.context, computed.take(slice(item.replay, None)))
            )
            local: Rows | Stored | Joined
            if start == 0:
                local, local_positions = item.local, item.local_positions
            else:
                # The window may reach past this call's earlier chunks into stored rows.
                low = int(item.positions[start]) - (self.window - 1)
                kept = int(np.count_nonzero(item.local_positions >= low))
                reach = max(0, start - (self.window - 1))
                local = computed.take(slice(reach, start))
                local_positions = item.positions[reach:start]
                if kept:
                    assert not isinstance(item.local, Joined)  # only chunks are joined
                    local = Joined(_last_rows(item.local, kept), local)
                    local_positions = np.concatenate(
                        [item.local_positions[len(item.local_positions) - kept :], local_positions]
                    )
            chunk = RowBatchItem(
                context=context,
                local=local,
                local_positions=local_positions,
                tokens=item.tokens[start:stop],
                positions=item.positions[start:stop],
                parents=np.arange(stop - start) - 1,
                replay=max(0, min(item.replay, stop) - start),
                local_lower=item.local_lower,
                consumer_from=item.consumer_from,
            )
            done.extend(self.compute_rows([chunk]))
            start = stop
        return Rows.concat(done)

    def _compute_rows(
        self, batch: list[RowBatchItem], context: BatchContext | None = None
    ) -> list[Rows]:
        """Compute the new rows of every item in one vectorised, tree-masked pass.

        Each new row attends to the stored context plus its own ancestors (and itself) among
        this round's rows, under each attention's rule: global causal encoder, causal
        cross-attention over shared K/V, and a sliding local window.
        """
        if not batch:
            return []
        w = self.weights
        layout = self.layout
        width = self.width
        size = len(batch)
        new_counts = np.array([len(item.tokens) for item in batch], dtype=np.int64)
        earlier_counts = np.array([len(item.earlier_positions) for item in batch], dtype=np.int64)
        q_max = int(new_counts.max())
        e_counts = earlier_counts + new_counts
        e_max = int(e_counts.max())
        if context is None:
            context = self.batch_context(batch, tail=e_max, local_room=False)
        context.reserve(e_max)

        # Flat -> padded scatter indices for new rows (queries) and for extras (earlier + new).
        q_batch, q_rows = _ragged(new_counts)
        e_new_rows = q_rows + np.repeat(earlier_counts, new_counts)

        tokens = np.zeros((size, q_max), dtype=np.int64)
        positions = np.zeros((size, q_max), dtype=np.int64)
        tokens[q_batch, q_rows] = np.concatenate([item.tokens for item in batch])
        positions[q_batch, q_rows] = np.concatenate([item.positions for item in batch])
        q_valid = np.zeros((size, q_max), dtype=bool)
        q_valid[q_batch, q_rows] = True
        replay = np.array([item.replay for item in batch], dtype=np.int64)
        q_full = q_valid & (np.arange(q_max)[None, :] >= replay[:, None])
        q_consumer = q_valid & (positions >= context.consumer_from[:, None])

        e_pos = np.full((size, e_max), _FAR, dtype=np.int64)
        e_full = np.zeros((size, e_max), dtype=bool)
        e_parent = np.full((size, e_max), -1, dtype=np.int64)
        extras = self._scratch("extras", (size, e_max, layout.size))

        def put(columns: slice, values: np.ndarray) -> None:
            """Store new rows' columns (values padded like the queries) in `extras`."""
            extras[..., columns][q_batch, e_new_rows] = values[q_batch, q_rows]

        e_pos[q_batch, e_new_rows] = positions[q_batch, q_rows]
        e_full[q_batch, e_new_rows] = q_full[q_batch, q_rows]
        e_parent[q_batch, e_new_rows] = np.concatenate([item.parents for item in batch])
        if earlier_counts.any():
            e_batch, e_rows = _ragged(earlier_counts)
            e_pos[e_batch, e_rows] = np.concatenate([i.earlier_positions for i in batch])
            e_full[e_batch, e_rows] = np.concatenate([i.earlier_full for i in batch])
            e_parent[e_batch, e_rows] = np.concatenate([i.earlier_parents for i in batch])
            extras[e_batch, e_rows] = np.concatenate(
                [i.earlier.data for i in batch if i.earlier is not None and len(i.earlier)]
            )
        # ancestor[b, i, j]: extra row j is query i itself or one of its ancestors.
        q_index = np.minimum(earlier_counts[:, None] + np.arange(q_max)[None, :], e_max - 1)
        if _all_chains(e_parent, e_counts):  # the common case: no branching anywhere
            ancestor = np.arange(e_max)[None, None, :] <= q_index[:, :, None]
        else:
            ancestor = _ancestors(e_parent, e_counts)  # (B, E, E)
            ancestor = np.take_along_axis(ancestor, q_index[:, :, None], axis=1)
        ancestor &= q_valid[:, :, None]

        # Masks as additive biases, built once and shared by every layer.
        qpos = positions[:, :, None]
        c = context.stored
        stored = np.arange(c)[None, None, :]
        ctx_visible = stored <= qpos  # causal over stored rows (matters for replay rows)
        if context.ragged:
            ctx_visible = ctx_visible & (stored < context.length[:, None, None])
        ext_visible = ancestor & e_full[:, None, :]
        reach = qpos - self.window
        lower = context.lower[:, None, None]
        local_ctx = context.local_positions[:, None, :]
        local_ctx_visible = (local_ctx > reach) & (local_ctx >= lower) & (local_ctx <= qpos)
        local_ext_visible = ancestor & (e_pos[:, None, :] > reach) & (e_pos[:, None, :] >= lower)
        local_bias = _bias(np.concatenate([local_ctx_visible, local_ext_visible], axis=-1))
        bounded = bool(context.lower.any())
        if bounded:  # a row that sees no local key gets no local update (not a uniform mix)
            local_seen = local_ctx_visible.any(-1) | local_ext_visible.any(-1)
        merged = context.merged
        g = context.globals
        if merged:
            global_bias = _bias(np.concatenate([ctx_visible, ext_visible], axis=-1))
            span = slice(0, c + e_max)
            tail = slice(c, c + e_max)
        else:
            ctx_bias = _bias(ctx_visible) if (context.ragged or replay.any()) else None
            ext_bias = _bias(ext_visible)
        enc_cols = slice(layout.encoder_keys.start, layout.encoder_values.stop)
        shared_cols = slice(layout.shared_keys.start, layout.shared_values.stop)

        # Encoder over every new row (replay rows take their stored source instead).
        wo, f_in, f_out = w.encoder[3:]
        x = self.embed(tokens, positions)
        h = rms_norm(x)
        qkv = h @ self._encoder_qkv
        put(enc_cols, qkv[..., width:])
        q = qkv[..., :width]
        if merged:
            g[:, :2, tail] = planes(extras[..., enc_cols], width)
            attended = _attend(q, g[:, 0, span], g[:, 1, span], global_bias)
        else:
            attended = _attend_two(
                q,
                (g[:, 0], g[:, 1], ctx_bias if context.ragged else None),
                (extras[..., layout.encoder_keys], extras[..., layout.encoder_values], ext_bias),
            )
        x = x + attended @ wo
        source = x + feed_forward(x, f_in, f_out)
        if replay.any():
            for b, item in enumerate(batch):
                if item.replay:
                    source[b, : item.replay] = item.context.columns(
                        layout.source, item.positions[: item.replay]
                    )
        shared = source @ self._shared_kv
        put(shared_cols, shared)
        put(layout.source, source)
        if merged:
            g[:, 2:, tail] = planes(extras[..., shared_cols], width)
            cross_parts = (g[:, 2, span], g[:, 3, span])

        # Consumers: sliding local window + causal cross-attention over shared K/V.
        x = source
        for index, layer in enumerate(w.layers):
            g_in = layer[6]
            h = rms_norm(x)
            projected = h @ self._layer_in[index]  # local q | local k | local v | cross q
            keys_slice, values_slice = layout.local_keys(index), layout.local_values(index)
            pair = slice(keys_slice.start, values_slice.stop)
            put(pair, projected[..., width : 3 * width])
            local_kv = np.concatenate(
                [
                    context.local[..., 2 * index * width : (2 * index + 2) * width],
                    extras[..., pair],
                ],
                axis=1,
            )
            local = _attend(
                projected[..., :width],
                local_kv[..., :width],
                local_kv[..., width:],
                local_bias,
            )
            if bounded:
                local = local * local_seen[:, :, None]
            cross_q = projected[..., 3 * width :]
            if merged:
                cross = _attend(cross_q, *cross_parts, global_bias)
            else:
                cross = _attend_two(
                    cross_q,
                    (g[:, 2], g[:, 3], ctx_bias),
                    (extras[..., layout.shared_keys], extras[..., layout.shared_values], ext_bias),
                )
            x = x + np.concatenate([local, cross], axis=-1) @ self._layer_out[index]
            x = x + feed_forward(x, g_in, self._feed_out[index])
        logits = rms_norm(x) @ w.head

        new = extras[q_batch, e_new_rows]  # (total new rows, F), flat in batch order
        new[:, layout.logits] = logits[q_batch, q_rows]
        skipped = ~q_consumer[q_batch, q_rows]
        if skipped.any():  # compact recovery: these rows never ran the consumers
            new[skipped, layout.local.start :] = 0.0
        bounds = [0, *np.cumsum(new_counts).tolist()]
        return BatchRows([Rows(new[bounds[b] : bounds[b + 1]], layout) for b in range(size)], new)


_FAR = -(10**12)  # a position no window reaches
# Planes of `Layout.globals` (see `planes`): keys, then values, of each global attention.
ENCODER_PLANE, SHARED_PLANE = 0, 2
PREFILL_CHUNK = 256  # rows per chunk of a long prefill
# When a long chain's local attention runs over sliding windows (measured, one BLAS thread): a
# masked score costs ~8.5 ns, while each windowed query costs about as much as 48 scores and each
# windowed call as 5,000; the windows are taken when they save more than that.
WINDOW_QUERY_SCORES = 48
WINDOW_CALL_SCORES = 5_000
# A batch of long chains runs global attention in blocks of this many queries when the chains
# are at least as long as the stored rows and hold this many query rows in all (measured: 15-33%
# faster there; slower with short chains or long stored contexts, where blocks re-read keys).
CAUSAL_BLOCK_ROWS = 32
CAUSAL_BLOCK_MIN_QUERIES = 256
PADDED_ROWS = 256  # padded batch contexts start with room for this many rows
# A work buffer shrinks after this many calls in a row that use at most a quarter of it, and
# is dropped after this many forwards that do not use it.
SHRINK_AFTER = 32
# Items of a batch whose context lengths differ this much are computed in separate groups.
GROUP_RATIO = 4
GROUP_ROWS = 512  # no group is cut off below this many rows: padding them costs little


def _last_rows(rows: Rows | Stored, count: int) -> Rows | Stored:
    """The last `count` rows of a stored or computed set of rows."""
    if isinstance(rows, Rows):
        return rows.take(slice(len(rows) - count, len(rows)))
    index = rows.index
    if isinstance(index, slice):
        return Stored(rows.store, slice(index.stop - count, index.stop))
    return Stored(rows.store, index[len(index) - count :])


def _window_rows(batch: list[RowBatchItem], count: int) -> tuple[object, np.ndarray] | None:
    """The pool slots of every item's local window rows, item after item, when each item
    holds `count` of them in the same store (steady decoding); else None."""
    store = None
    slots = []
    for item in batch:
        local = item.local
        if not isinstance(local, Stored) or len(local) != count:
            return None
        if store is None:
            store = local.store
        elif local.store is not store:
            return None
        index = local.index
        slots.append(np.arange(index.start, index.stop) if isinstance(index, slice) else index)
    return store, np.concatenate(slots)


def _bias(visible: np.ndarray) -> np.ndarray:
    return np.where(visible, 0.0, _NEG)


def _attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Softmax attention with an additive mask; `q` is already scaled."""
    scores = q @ keys.swapaxes(-1, -2)
    scores += bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    return (scores @ values) / scores.sum(axis=-1, keepdims=True)


def _attend_window(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    bias: np.ndarray,
    contiguous: int,
    window: int,
) -> np.ndarray:
    """Local attention of a chain's new rows (the last of `keys`' rows; the last `contiguous`
    rows hold consecutive positions). A query whose `window` rows all lie among those sees
    exactly them, so a long chain (a prefill) attends over sliding windows of the keys:
    O(q x window) scores instead of O(q x rows). The first queries take the masked path."""
    size, count = q.shape[:2]
    head = min(count, max(0, window - 1 - (contiguous - count)))  # reach before the chain
    saved = size * (count - head) * (keys.shape[1] - WINDOW_QUERY_SCORES)
    if saved < WINDOW_CALL_SCORES:
        return _attend(q, keys, values, bias)
    out = np.empty_like(q)
    if head:
        out[:, :head] = _attend(q[:, :head], keys, values, bias[:, :head])
    # Window j covers rows [first + j, first + j + window); query `head` ends at its own row.
    first = keys.shape[1] - contiguous
    start = contiguous - count + head - window + 1
    rows = slice(start, start + count - head)
    key_windows = sliding_window_view(keys[:, first:], window, axis=1)[:, rows]
    value_windows = sliding_window_view(values[:, first:], window, axis=1)[:, rows]
    scores = (q[:, head:, None, :] @ key_windows)[:, :, 0, :]  # (B, n, window), all visible
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    mixed = (scores[:, :, None, :] @ value_windows.swapaxes(-1, -2))[:, :, 0, :]
    out[:, head:] = mixed / scores.sum(axis=-1, keepdims=True)
    return out


def _attend_two(
    q: np.ndarray,
    first: tuple[np.ndarray, np.ndarray, np.ndarray | None],
    second: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Softmax attention over two key sets without concatenating them (keeps a long stored
    context a zero-copy view)."""
    (k1, v1, b1), (k2, v2, b2) = first, second
    # OpenBLAS multiplies a few query rows by many keys about twice as fast when the queries
    # are column-major (measured 43 vs 81 us for 5 x 4096 keys; the same for 1 or 8+ rows).
    # Measured for 2-D products only: stacked ones were slower that way.
    s1 = (np.asfortranarray(q) if q.ndim == 2 else q) @ k1.swapaxes(-1, -2)
    if b1 is not None:
        s1 += b1
    s2 = q @ k2.swapaxes(-1, -2)
    s2 += b2
    top = np.maximum(s1.max(axis=-1, keepdims=True, initial=_NEG), s2.max(axis=-1, keepdims=True))
    s1 -= top
    s2 -= top
    np.exp(s1, out=s1)
    np.exp(s2, out=s2)
    total = s1.sum(axis=-1, keepdims=True) + s2.sum(axis=-1, keepdims=True)
    return (s1 @ v1 + s2 @ v2) / total


def _ragged(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item and row index of every row of items holding `counts` rows each, items in order
    (flat rows -> (item, row) of a padded array)."""
    items = np.repeat(np.arange(len(counts)), counts)
    return items, np.arange(len(items)) - (np.cumsum(counts) - counts)[items]


def _all_chains(parents: np.ndarray, counts: np.ndarray) -> bool:
    """Every item's rows form one chain: row i's parent is row i - 1 (the first hangs off
    the stored context)."""
    index = np.arange(parents.shape[1])
    chained = (parents == index - 1) | (index >= counts[:, None])
    return bool(chained.all())


def _ancestors(parents: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """a[b, i, j]: row j is row i itself or one of its ancestors.

    The leading rows whose parents are -1, 0, 1, ... form a chain (lower-triangular block,
    built without a loop); the remaining tree rows walk up to the chain, one level per pass.
    """
    size, rows = parents.shape
    index = np.arange(rows)
    chain_like = parents == (index - 1)[None, :]
    chain = np.where(chain_like.all(axis=1), rows, np.argmin(chain_like, axis=1))
    chain = np.minimum(chain, counts)
    row = index[None, :, None]
    col = index[None, None, :]
    in_chain = row < chain[:, None, None]
    result = in_chain & (col <= row) & (col < chain[:, None, None])
    tree = (~in_chain[:, :, 0]) & (index[None, :] < counts[:, None])
    if tree.any():
        result |= tree[:, :, None] & (col == row)
        current = np.where(tree, parents, -1)
        batch = np.arange(size)[:, None].repeat(rows, axis=1)
        for _ in range(rows):
            climbing = current >= chain[:, None]
            if not climbing.any():
                break
            b, i = batch[climbing], np.nonzero(climbing)[1]
            result[b, i, current[climbing]] = True
            current = np.where(
                climbing, np.take_along_axis(parents, np.maximum(current, 0), 1), current
            )
        landed = tree & (current >= 0)
        result |= landed[:, :, None] & (col <= current[:, :, None])
    return result


def _softmax_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    scores = np.where(mask, (q @ k.swapaxes(-1, -2)) / np.sqrt(q.shape[-1]), _NEG)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.where(mask, np.exp(scores), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return (weights / np.where(total > 0, total, 1.0)) @ v


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


def length_groups(batch: list[RowBatchItem]) -> list[list[int]]:
    """The batch's items in groups of similar context length, each in batch order.

    Padded attention costs every item the longest context in its batch: one 4000-row history
    among 127 short ones made a decode round 10x slower. Sorted by length, the items are cut
    where one is over GROUP_RATIO times the one before and longer than GROUP_ROWS; a batch of
    like lengths stays one group (one forward), as a decode batch usually is."""
    lengths = [item.encoder_length + len(item.tokens) for item in batch]
    if max(lengths) <= max(GROUP_ROWS, GROUP_RATIO * min(lengths)):
        return [list(range(len(batch)))]  # no two of them differ enough: no sort needed
    order = sorted(range(len(batch)), key=lengths.__getitem__)
    bounds = []  # the shortest length of every group after the first
    for before, after in pairwise(order):
        if lengths[after] > max(GROUP_ROWS, GROUP_RATIO * lengths[before]):
            bounds.append(lengths[after])
    if not bounds:
        return [list(range(len(batch)))]
    groups: list[list[int]] = [[] for _ in range(len(bounds) + 1)]
    for index, length in enumerate(lengths):
        groups[sum(length >= bound for bound in bounds)].append(index)
    return groups


def _group_suffixes(batch: list[RowBatchItem], groups: list[list[int]]) -> list[str]:
    """Work-buffer names for the groups, stable while groups come and go: the largest group
    keeps the batch's own buffers (a long request joining many short ones moves none of
    theirs), the others are named by their longest context's power of 4 (length groups are
    over 4x apart, so two never share one). Numbered if two would: sharing stays exact (the
    kept-rows records go with the buffer) but the groups would overwrite each other's rows."""
    largest = max(range(len(groups)), key=lambda g: len(groups[g]))
    longest = [max(batch[i].encoder_length + len(batch[i].tokens) for i in g) for g in groups]
    suffixes = [
        "" if number == largest else f" ~{int(math.log(longest[number], 4))}"
        for number in range(len(groups))
    ]
    if len(set(suffixes)) < len(suffixes):
        suffixes = [f" #{number}" if number else "" for number in range(len(groups))]
    return suffixes


def _chain_shape(batch: list[RowBatchItem]) -> tuple[int, int] | None:
    """(k, q) when every item adds q full rows in one chain after the k rows an earlier call
    computed (also a chain) and after all its stored rows (a draft may store only the most
    recent ones), under exact recovery rules; else None."""
    first = batch[0]
    k, q = len(first.earlier_positions), len(first.tokens)
    if q == 0 or q > PREFILL_CHUNK:  # a long prefill goes chunk by chunk instead
        return None
    for item in batch:
        if (
            len(item.tokens) != q
            or len(item.earlier_positions) != k
            or item.replay
            or item.local_lower
            or item.consumer_from
            or (k and (item.earlier is None or len(item.earlier) != k))
        ):
            return None
    if k == 0 and q == 1:  # a decode step: checked without building arrays
        plain = all(
            item.parents[0] == -1 and item.positions[0] >= len(item.context) for item in batch
        )
        return (0, 1) if plain else None
    if k == 1 and q == 1:  # a second draft level: checked without building arrays either
        plain = all(
            item.parents[0] == 0
            and item.earlier_parents[0] == -1
            and item.earlier_full[0]
            and item.positions[0] == item.earlier_positions[0] + 1
            and item.earlier_positions[0] >= len(item.context)
            for item in batch
        )
        return (1, 1) if plain else None
    steps = np.arange(k + q)
    parents = np.array([item.parents for item in batch])
    positions = np.array([item.positions for item in batch])
    if k:
        earlier_parents = np.array([item.earlier_parents for item in batch])
        earlier_positions = np.array([item.earlier_positions for item in batch])
        if not (
            np.concatenate([item.earlier_full for item in batch]).all()
            and (earlier_parents == steps[:k] - 1).all()
        ):
            return None
        positions = np.concatenate([earlier_positions, positions], axis=1)
    stored = np.array([len(item.context) for item in batch])
    return (
        (k, q)
        if (parents == steps[k:] - 1).all()
        and (positions == positions[:, :1] + steps).all()
        and (positions[:, 0] >= stored).all()
        else None
    )
