"""Screen snapshots of the round diff (key 6) at 120x40 and 80x24: a round of the default
scenario that commits drafts, publishes to the cache and shares blocks. Regenerate after an
intended change with `--snapshot-update` and look at the report."""

from __future__ import annotations

from typing import Any

from tests.app.helpers import make_app
from tests.app.tour import SMALL, WIDE

ROUNDS = ["space"] * 2


def test_diff_view(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=WIDE, press=[*ROUNDS, "6"])


def test_diff_view_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=SMALL, press=[*ROUNDS, "6"])
