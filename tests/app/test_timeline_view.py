"""The timeline's cells, from a real engine's event log (issue 25): a small token budget
chunks a prompt, a small pool preempts a request, a cancel ends one."""

from __future__ import annotations

from deepinfer_tui.timeline_view import timeline_lines, timeline_states
from engine import Engine, EngineConfig, TinyModel
from tests.app.test_round_view import plain


def crowded() -> Engine:
    """Budget 6 rows a round, 8 blocks of 4: the 10-token prompt takes two rounds (6 + 4),
    the third request is preempted whenever the others need a block."""
    engine = Engine(
        TinyModel(seed=2), config=EngineConfig(token_budget=6, block_size=4, num_blocks=8)
    )
    engine.submit(list(range(1, 11)), max_tokens=6, request_id="a")
    engine.submit([3] * 9, max_tokens=8, request_id="b")
    engine.submit([5] * 3, max_tokens=3, request_id="c")
    while not engine.idle:
        engine.step()
    return engine


def kinds(engine: Engine, request_id: str, kind: str) -> list[int]:
    return [e["tick"] for e in engine.trace if e["kind"] == kind and e["request_id"] == request_id]


def test_each_round_shows_what_the_request_did_in_it() -> None:
    engine = crowded()
    grid = timeline_states(engine.trace)
    # a: two prefill chunks (6 of 10, then 4), then decoding; short of a block once; done.
    assert kinds(engine, "a", "prefill") == [1, 2]
    assert [grid["a"][t] for t in (1, 2, 3)] == ["prefilling", "prefilling", "decoding"]
    deferred, finished = kinds(engine, "a", "deferred"), kinds(engine, "a", "finished")
    assert all(grid["a"][t] == "waiting" for t in deferred) and deferred
    assert grid["a"][finished[0]] == "finished" and max(grid["a"]) == finished[0]
    # c: queued while the budget went to a and b, then run, preempted, run again ...
    first_run = min(kinds(engine, "c", "prefill"))
    assert all(grid["c"][t] == "queued" for t in range(1, first_run))
    preempted = kinds(engine, "c", "preempt")
    assert len(preempted) >= 2 and all(grid["c"][t] == "preempted" for t in preempted)
    # ... and stays preempted in the rounds between a preemption and its readmission, but in a
    # round where it was admitted and gave its place back before running: waiting.
    readmitted = min(t for t in kinds(engine, "c", "prefill") if t > preempted[0])
    gave_back = [t for t in kinds(engine, "c", "deferred") if preempted[0] < t < readmitted]
    assert gave_back and all(grid["c"][t] == "waiting" for t in gave_back)
    between = set(range(preempted[0], readmitted)) - set(gave_back)
    assert all(grid["c"][t] == "preempted" for t in between)


def test_the_lines_draw_one_symbol_per_round() -> None:
    engine = crowded()
    shown = plain(timeline_lines(engine.trace, engine.tick, 60, 20, "b", ("a", "b", "c")))
    legend = " ".join(shown[:2])  # 60 cells hold the legend in two lines
    assert "· queued" in shown[0] and "↺ preempted" in legend and "✗ cancelled" in shown[1]
    rows = {line[:2].strip(): line[2:] for line in shown if line[:2] in ("a ", "b ", "c ")}
    assert rows["a"].rstrip() == "▒▒██~██✓"  # rounds 1-8, hand-read from the trace
    assert rows["c"].rstrip() == "···▒↺↺~▒↺↺✓"
    assert rows["b"].rstrip().endswith("✓") and len(rows["b"].rstrip()) == engine.tick
    assert shown[-1] == f"rounds 1-{engine.tick} · 3 requests"


def test_a_narrow_pane_shows_the_newest_rounds() -> None:
    engine = crowded()
    assert engine.tick == 13
    shown = plain(timeline_lines(engine.trace, engine.tick, 10, 20, "c", ("a", "b", "c")))
    rows = {line[:2]: line[2:].rstrip() for line in shown}
    assert rows["c "] == "↺~▒↺↺✓"  # rounds 6-13 of c's ···▒↺↺~▒↺↺✓
    assert rows["r "] == "····|··▼"  # round 10 ruled, the current round (13) marked
    assert shown[-1] == "r6-13 · ←…"  # the short form, cut to the pane's 10 cells


def test_a_short_pane_keeps_the_selected_row_and_only_the_states_on_screen() -> None:
    engine = crowded()
    shown = plain(timeline_lines(engine.trace, engine.tick, 40, 5, "c", ("a", "b", "c")))
    assert shown[:2] == ["· queued  ▒ prefilling  █ decoding", "~ waiting  ↺ preempted  ✓ finished"]
    assert shown[3].startswith("c ") and not any(line.startswith("a ") for line in shown)
    assert shown[-1] == "rounds 1-13 · requests 3-3 of 3"


def test_a_cancel_between_rounds_ends_the_row_in_the_next_rounds_cell() -> None:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=8))
    engine.submit([1, 2, 3], max_tokens=9, request_id="x")
    engine.step()
    engine.step()
    engine.cancel("x")
    # Round 2 keeps what x did in it; the cancel is in round 3, which has not run yet.
    assert timeline_states(engine.trace)["x"] == {1: "prefilling", 2: "decoding", 3: "cancelled"}


def test_a_request_cancelled_while_queued_shows_it_in_the_round_it_would_have_run_in() -> None:
    engine = Engine(TinyModel(seed=2), config=EngineConfig(token_budget=8))
    engine.submit([1, 2, 3], max_tokens=4, request_id="x")
    engine.step()
    engine.submit([4, 5], max_tokens=4, request_id="y")  # between rounds 1 and 2
    engine.cancel("y")
    engine.step()
    assert timeline_states(engine.trace)["y"] == {2: "cancelled"}
    assert timeline_states(engine.trace)["x"][1] == "prefilling"


def test_before_the_first_round_the_view_says_so() -> None:
    assert plain(timeline_lines([], 0, 40, 10)) == ["no round has run yet: press space to step"]


def test_scrolled_back_the_columns_end_earlier_but_never_before_round_1() -> None:
    engine = crowded()  # 13 rounds; c's row is ···▒↺↺~▒↺↺✓
    order = ("a", "b", "c")
    shown = plain(timeline_lines(engine.trace, engine.tick, 10, 20, "c", order, back=4))
    rows = {line[:2]: line[2:].rstrip() for line in shown}
    assert rows["c "] == "··▒↺↺~▒↺"  # rounds 2-9
    assert "▼" not in rows["r "]  # the current round is off to the right
    assert shown[-1] == "r2-9 · ← →"  # the short form fits the pane's 10 cells
    far = plain(timeline_lines(engine.trace, engine.tick, 10, 20, "c", order, back=50))
    assert {line[:2]: line[2:].rstrip() for line in far}["c "] == "···▒↺↺~▒"  # rounds 1-8


def test_rows_of_requests_that_ended_before_the_rounds_shown_give_way() -> None:
    # Issue 26's scenario at tick 112 listed request-1..21, long finished, with blank rows:
    # the window holds the cursor's request only while it has a state in the rounds drawn.
    engine = Engine(TinyModel(seed=2), config=EngineConfig(max_active=1))
    ids = [engine.submit([1 + i, 2], max_tokens=2, request_id=f"r{i:02}") for i in range(12)]
    while not engine.idle:
        engine.step()
    shown = plain(timeline_lines(engine.trace, engine.tick, 14, 8, "r00", ids))
    rows = [line for line in shown if line[:3] in ids]
    assert rows and all(line[3:].strip() for line in rows), shown  # none blank
    near = plain(timeline_lines(engine.trace, engine.tick, 40, 8, "r00", ids))
    assert "r00" in {line[:3] for line in near}  # wide enough for its rounds: it stays
