"""What the KV pane and the export say about a cached prefix whose time has passed: the engine
expires entries when a round starts, so until then an entry is shown as expired, not cached."""

from __future__ import annotations

from rich.console import Console

from deepinfer_tui.document import cache_table
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from deepinfer_tui.widgets.blocks import block_table_lines
from deepinfer_tui.widgets.view import View
from engine import Engine, EngineConfig, TinyModel


def prefix_lines(view: View) -> list[str]:
    """Every KV-pane line about a finished request's cached prefix, for every request."""
    return [
        line.plain
        for request in view.snapshot["requests"]
        for line in block_table_lines(request, view)
        if line.plain.startswith("its prefix")
    ]


def test_the_built_in_scenario_at_200s_shows_its_prefixes_as_expired() -> None:
    session = Session(default_scenario())
    while session.clock.now < 200:  # the scenario moves the clock there (8 rounds in)
        session.step()
    view = View(session.snapshot(), session.log_view())
    warm_times = {entry["warm_until"] for entry in view.snapshot["cache"]}
    assert warm_times and max(warm_times) <= session.clock.now
    lines = prefix_lines(view)
    assert lines
    for line in lines:
        assert "cached" not in line and "released at the next round" in line, line
        assert any(f"expired at {t:g}s" in line for t in warm_times), line

    session.step()  # this round releases them: the pane no longer mentions them
    view = View(session.snapshot(), session.log_view())
    assert not [entry for entry in view.snapshot["cache"] if entry["warm_until"] <= 200]
    assert not [line for line in prefix_lines(view) if "expired" in line]


def finished_engine(clock: list[float]) -> Engine:
    engine = Engine(
        TinyModel(seed=3),
        config=EngineConfig(block_size=2, state_ttl=1.0, prefix_ttl=5.0),
        clock=lambda: clock[0],
    )
    engine.generate([1], max_tokens=1)  # caches [1]: 1 position
    engine.generate([3, 4], max_tokens=1)  # caches [3 4]: 2 positions
    return engine


def test_live_prefixes_say_how_long_they_stay_and_count_positions_right() -> None:
    clock = [0.0]
    engine = finished_engine(clock)
    view = View(engine.snapshot(), engine.trace)
    assert sorted(prefix_lines(view)) == [
        "its prefix is cached hot: 1 position in #0 (until 1s)",
        "its prefix is cached hot: 2 positions in #1 (until 1s)",
    ]
    clock[0] = 3.0
    view = View(engine.snapshot(), engine.trace)
    assert all(line.endswith("(until 5s)") for line in prefix_lines(view))
    clock[0] = 5.0
    view = View(engine.snapshot(), engine.trace)
    assert sorted(prefix_lines(view)) == [
        "its prefix expired at 5s: 1 position in #0, released at the next round",
        "its prefix expired at 5s: 2 positions in #1, released at the next round",
    ]


def test_the_export_cache_table_marks_expired_entries() -> None:
    clock = [5.0]
    engine = finished_engine(clock)  # published at 5s: warm until 10s
    console = Console(width=120, record=True)
    console.print(cache_table(engine.snapshot()))
    assert "expired" not in console.export_text(clear=True)
    clock[0] = 10.0
    console.print(cache_table(engine.snapshot()))
    text = console.export_text(clear=True)
    assert text.count("expired; released next round") == 2
    assert "│ warm " not in text and "│ hot " not in text  # no state cell says live
