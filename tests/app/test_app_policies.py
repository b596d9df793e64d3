"""The debugger runs every schedule and cache policy a scenario may choose (issues 22, 24)."""

from __future__ import annotations

import pytest

from deepinfer_tui.app import DebuggerApp
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.helpers import shown_lines


@pytest.mark.parametrize(
    ("cache_policy", "schedule_policy", "token_budget"),
    [("blocks", "priority", 3), ("radix", "lpm", 5)],
)
async def test_the_app_steps_and_exports_under_each_policy(
    cache_policy: str, schedule_policy: str, token_budget: int, tmp_path: object
) -> None:
    scenario = default_scenario().with_overrides(
        cache_policy=cache_policy, schedule_policy=schedule_policy, token_budget=token_budget
    )
    app = DebuggerApp(Session(scenario), export_dir=tmp_path)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(8):
            await pilot.press("space")
        await pilot.pause()
        log = "\n".join(shown_lines(app.query_one("CommitLog")))
        assert "schedule" in log  # the round's rows against the budget
        assert f"of {token_budget}" in log
        snapshot = app.session.snapshot()
        assert snapshot["config"]["cache_policy"] == cache_policy
        assert snapshot["metrics"]["requests"]["finished"] >= 1
