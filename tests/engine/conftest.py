"""Engine tests: the library through its public API. Shared checks are in `helpers.py`
(oracle equality, block invariants, a manual clock) and `model_helpers.py` (hand-built
batches for the model's forward)."""

import pytest

from tests.engine.helpers import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """An injected clock that moves only when a test moves it."""
    return ManualClock()
