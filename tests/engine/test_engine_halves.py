"""Large attentions in two halves of their query rows, one half on a worker thread
(`engine/model/fastpaths/halves.py`): the same rows as the whole call to rounding, the
caller's NumPy error state in the worker, and whole requests still equal to the oracle."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from engine.model.fastpaths import halves
from engine.model.fastpaths.keys import attend_two
from engine.model.layers import attend, mask_bias
from tests.engine.helpers import ManualClock, check_against_oracle


class CountingWorker:
    """The worker thread, counting the halves handed to it."""

    def __init__(self) -> None:
        self.halves = 0
        self._worker = halves._worker()

    def submit(self, work: Callable[..., Any], *args: Any) -> Future[Any]:
        self.halves += 1
        return self._worker.submit(work, *args)


@contextmanager
def halves_counted(always: bool = True) -> Iterator[CountingWorker]:
    """Count the calls computed in halves; with `always`, every call with rows enough."""
    worker = CountingWorker()
    with (
        patch.object(halves, "_worker", lambda: worker),
        patch.object(halves, "HALVES_MIN_SCORES", 0 if always else halves.HALVES_MIN_SCORES),
        patch.object(halves, "_cores", lambda: 2),
    ):
        yield worker


def causal_bias(rows: int, keys: int) -> np.ndarray:
    """Each of the `rows` queries (the last rows of `keys`) sees the keys up to its own."""
    return mask_bias(np.arange(keys)[None, :] <= np.arange(keys - rows, keys)[:, None])


@pytest.mark.parametrize("rows", [16, 37, 256])
@pytest.mark.parametrize("batch", [None, 1, 3])
def test_attention_in_halves_equals_the_whole_call_to_rounding(
    rows: int, batch: int | None
) -> None:
    rng = np.random.default_rng(rows)
    lead = () if batch is None else (batch,)
    q = rng.standard_normal((*lead, rows, 16))
    keys, values = rng.standard_normal((2, *lead, 300 + rows, 16))
    per_row = np.broadcast_to(causal_bias(rows, 300 + rows), (*lead, rows, 300 + rows)).copy()
    broadcast = np.zeros((*lead, 1, 300 + rows))  # a bias shared by every query row
    stored_keys, stored_values = keys[..., :300, :], values[..., :300, :]
    chain_keys, chain_values = keys[..., 300:, :], values[..., 300:, :]
    chain_bias = per_row[..., 300:]
    whole = [
        attend(q, keys, values, per_row),
        attend(q, keys, values, broadcast),
        attend_two(q, (stored_keys, stored_values, None), (chain_keys, chain_values, chain_bias)),
    ]
    with halves_counted() as worker:
        split = [
            halves.attend_split(q, keys, values, per_row),
            halves.attend_split(q, keys, values, broadcast),
            attend_two(
                q, (stored_keys, stored_values, None), (chain_keys, chain_values, chain_bias)
            ),
        ]
    assert worker.halves == 3
    # A product of fewer rows may be tiled otherwise by the BLAS (OpenBLAS's AVX-512 kernels
    # do), which moves the last bits: a few ulps of values about 1, far under 1e-10.
    for one, two in zip(whole, split):
        np.testing.assert_allclose(two, one, rtol=0, atol=1e-13)


def test_small_calls_and_one_core_stay_whole() -> None:
    assert not halves.halves_pay(rows=8, scores=1 << 30)  # too few rows to split
    assert not halves.halves_pay(rows=256, scores=halves.HALVES_MIN_SCORES - 1)
    with patch.object(halves, "_cores", lambda: 1):
        assert not halves.halves_pay(rows=256, scores=1 << 30)
    with patch.object(halves, "_cores", lambda: 2):
        assert halves.halves_pay(rows=256, scores=halves.HALVES_MIN_SCORES)


def test_the_worker_half_keeps_the_callers_numpy_error_state() -> None:
    """The runner silences NumPy inside a forward, so an overflow fails one request instead of
    printing (or raising under `np.seterr`): the worker's half must be as silent."""
    q = np.full((64, 4), 1e308)  # scores overflow to inf; inf - inf is invalid
    keys = values = np.ones((64, 4))
    bias = np.zeros((64, 64))
    with halves_counted() as worker, warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning in either half raises
        with np.errstate(all="ignore"):
            out = halves.attend_split(q, keys, values, bias)
    assert worker.halves == 1
    assert not np.isfinite(out).any()  # non-finite, as the whole call gives: the runner fails it


@pytest.mark.parametrize("drafted", [False, True])
def test_long_prefills_in_halves_equal_the_oracle(drafted: bool) -> None:
    """Prompts long enough that their chunks' global attentions run in halves (at the real
    threshold), beside a short request; every request equals the oracle."""
    target = TinyModel(seed=5, window=4, width=16, depth=2, vocab_size=32)
    draft = make_draft(target, seed=6) if drafted else None
    config = EngineConfig(max_active=3, block_size=16, draft_width=2)
    engine = Engine(target, draft, config=config, clock=ManualClock())
    rng = np.random.default_rng(9)
    prompts = [[int(t) for t in rng.integers(0, 32, length)] for length in (700, 5, 600)]
    with halves_counted(always=False) as worker:
        ids = [engine.submit(prompt, max_tokens=6) for prompt in prompts]
        engine.run()
    assert worker.halves, "no attention was large enough to run in halves"
    for request_id in ids:
        check_against_oracle(engine, request_id)
