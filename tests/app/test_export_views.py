"""The trace-snapshot document holds every view of the app (issue 25): besides the draft trees
and the prefix cache, the timeline, the last round's token budget and the serving metrics,
with numbers worked out by hand for a crafted session under the injected clock."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from deepinfer_tui.export import render_exports
from deepinfer_tui.scenario import parse_scenario
from deepinfer_tui.session import Session

# No drafts (one token a round), one request at a time: b and c wait in the queue behind a.
CRAFTED: dict[str, Any] = {
    "name": "crafted",
    "model": {"vocab_size": 32, "width": 16, "depth": 2, "window": 4},
    "draft": None,
    "config": {"max_active": 1, "block_size": 4, "num_blocks": 16},
    "events": [
        {"tick": 0, "submit": {"id": "a", "prompt": [1, 2, 3], "max_tokens": 3}},
        {"tick": 0, "submit": {"id": "b", "prompt": [4, 5], "max_tokens": 2}},
        {"tick": 0, "submit": {"id": "c", "prompt": [6], "max_tokens": 2}},
    ],
}


def crafted_session() -> Session:
    """Round clocks 0, 0.25, 0.75, 1.0, 1.125 s. a: its prompt and first token in round 1,
    then a token in rounds 2 and 3 (done). c is cancelled, still queued, after round 2. b
    is first scheduled in round 4 (prompt and first token) and finishes in round 5."""
    session = Session(parse_scenario(CRAFTED))
    session.step()
    session.advance_clock(0.25)
    session.step()
    session.advance_clock(0.5)
    session.cancel("c")
    session.step()
    session.advance_clock(0.25)
    session.step()
    session.advance_clock(0.125)
    session.step()
    assert session.finished
    return session


@pytest.fixture(scope="module")
def text() -> str:
    return render_exports(crafted_session(), ["txt"])["txt"]


def section(text: str, heading: str) -> list[str]:
    """The lines from a heading up to the next blank line followed by a heading or rule."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith(("Round ·", "Metrics ·", "───"))
        ),
        len(lines),
    )
    return lines[start:end]


def test_the_views_follow_the_prefix_cache_in_the_order_of_their_keys(text: str) -> None:
    places = [text.index(h) for h in ("Prefix cache", "Timeline ·", "Round ·", "Metrics ·")]
    assert places == sorted(places)
    assert places[-1] < text.index("Commit log")


def test_the_timeline_draws_every_request_in_every_round(text: str) -> None:
    lines = section(text, "Timeline ·")
    rows = {line[:2]: line[2:] for line in lines}
    assert rows["a "] == "▒█✓"  # prompt and first token, a token, the last token
    assert rows["b "] == "···▒✓"  # queued behind a for rounds 1-3
    assert rows["c "] == "··✗"  # cancelled between rounds 2 and 3: round 3's cell
    assert rows["r "] == "····▼"  # the axis, round 5 the current one
    assert "rounds 1-5 · 3 requests" in lines
    assert "✗ cancelled" in lines[1]  # the legend names every state


def test_the_round_shows_the_last_rounds_budget_split(text: str) -> None:
    lines = section(text, "Round ·")
    bar = next(line for line in lines if line.startswith("b "))
    assert bar.endswith(" 1 decode")  # round 5: b's pending position, nothing else
    assert "round t5: 1 row of the token budget 2,048 (0%)" in lines


def test_the_metrics_give_each_requests_latencies_in_milliseconds(text: str) -> None:
    lines = section(text, "Metrics ·")
    assert "ms · the injected clock" in lines
    assert lines[2].split() == ["id", "ttft", "itl", "p95", "queue", "pre", "recomp"]
    table = {line.split()[0]: line.split()[1:] for line in lines[3:6]}
    # a: first token in round 1 (clock 0), then tokens at 0.25 and 0.75: ITL 250 and 500.
    assert table["a"] == ["0.0", "375.0", "500.0", "0.0", "0", "0"]
    # b: queued at 0, first scheduled (and first token) in round 4 at 1.0; ITL 1.125 - 1.0.
    assert table["b"] == ["1000.0", "125.0", "125.0", "1000.0", "0", "0"]
    assert table["c"] == ["-", "-", "-", "-", "0", "0"]  # never scheduled
    assert "preemptions 0 · recomputed 0 positions" in lines
    assert "ITL a (max 500.0 ms) ▄█" in lines  # 250 is half of 500: a half bar
    assert not any(line.startswith("ITL c") for line in lines)


def test_the_views_say_so_before_the_first_round() -> None:
    text = render_exports(Session(parse_scenario(CRAFTED)), ["txt"])["txt"]
    assert section(text, "Timeline ·")[1] == "no round has run yet"
    assert section(text, "Round ·")[1] == "no round has run yet"
    assert "ITL sparklines: no inter-token latency above 0 ms yet" in section(text, "Metrics ·")


def test_a_long_session_wraps_the_timeline_into_pages_of_the_documents_width() -> None:
    session = Session(parse_scenario({**CRAFTED, "config": {"block_size": 4, "num_blocks": 64}}))
    session.submit([7, 8], max_tokens=150)  # ~150 rounds: more than a 120-wide page holds
    session.run()
    lines = section(render_exports(session, ["txt"])["txt"], "Timeline ·")
    pages = [line for line in lines if line.startswith("rounds ")]
    rounds = [tuple(map(int, line.split()[1].split("-"))) for line in pages]
    assert rounds[0][0] == 1 and rounds[-1][1] == session.engine.tick
    assert all(later[0] == earlier[1] + 1 for earlier, later in pairwise(rounds))
    assert len(pages) >= 2 and all(len(line) <= 120 for line in lines)
    # The last page holds only the long request: the others had finished long before.
    assert pages[-1].endswith("1 request of 4 (the others were not in these rounds)")


def test_the_session_line_counts_in_words_one_and_many() -> None:
    session = Session(parse_scenario(CRAFTED))
    session.step()  # one operation, one round to undo, no scenario event pending
    one = render_exports(session, ["txt"])["txt"]
    assert "1 operation · 0 scenario events pending · undo 1 round" in one, one
    session.step()
    two = render_exports(session, ["txt"])["txt"]
    assert "2 operations · 0 scenario events pending · undo 2 rounds" in two
