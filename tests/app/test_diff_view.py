"""The round diff as a pure function: crafted snapshot pairs whose differences are known by
construction, then two real engine frames checked against what the events say happened."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from deepinfer_tui.diff_view import FrameMemory, cache_entries, diff_lines, round_diff
from deepinfer_tui.replay import Replay, parse_trace, trace_data
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from tests.app.helpers import plain


def pool(*refcounts: int) -> dict[str, Any]:
    return {"blocks": [{"id": i, "refcount": r} for i, r in enumerate(refcounts)]}


def request(rid: str, state: str, generated: list[int], reason: str | None = None) -> dict:
    return {"id": rid, "state": state, "generated": generated, "finish_reason": reason}


def snapshot(tick: int, refcounts: tuple[int, ...], requests: list, cache: Any = ()) -> dict:
    return {"tick": tick, "pool": pool(*refcounts), "requests": requests, "cache": list(cache)}


def test_blocks_allocated_freed_and_refcounts_that_moved() -> None:
    before = snapshot(3, (1, 0, 2, 1, 0), [])
    after = snapshot(4, (0, 1, 3, 1, 0), [])
    diff = round_diff(before, after)
    assert diff.allocated == (1,)  # 0 -> 1
    assert diff.freed == (0,)  # 1 -> 0
    assert diff.refcounts == ((2, 2, 3),)  # 2 -> 3; block 3 stayed at 1, block 4 at 0
    assert (diff.before_tick, diff.after_tick) == (3, 4)
    assert not diff.empty


def test_tokens_committed_and_rolled_back_and_states_per_request() -> None:
    before = snapshot(
        1,
        (),
        [
            request("a", "decoding", [5, 6, 7]),
            request("b", "queued", []),
            request("c", "decoding", [1]),
            request("d", "decoding", [9]),
        ],
    )
    after = snapshot(
        2,
        (),
        [
            request("a", "decoding", [5, 8, 9, 4]),  # 6 7 rolled back, 8 9 4 committed
            request("b", "prefilling", []),  # state only
            request("c", "decoding", [1]),  # nothing: not listed
            request("d", "finished", [9, 3], reason="length"),
            request("e", "queued", []),  # new
        ],
    )
    diff = round_diff(before, after)
    by_id = {change.request_id: change for change in diff.requests}
    assert set(by_id) == {"a", "b", "d", "e"}
    assert by_id["a"].committed == (8, 9, 4) and by_id["a"].rolled_back == (6, 7)
    assert by_id["a"].before == by_id["a"].after == "decoding"
    assert (by_id["b"].before, by_id["b"].after) == ("queued", "prefilling")
    assert by_id["d"].after == "finished (length)" and by_id["d"].committed == (3,)
    assert by_id["e"].before is None and by_id["e"].after == "queued"
    assert (diff.committed, diff.rolled_back) == (4, 2)


def test_an_undone_submit_is_a_request_gone() -> None:
    before = snapshot(2, (), [request("a", "decoding", [1]), request("u", "queued", [])])
    after = snapshot(2, (), [request("a", "decoding", [1])])
    (change,) = round_diff(before, after).requests
    assert (change.request_id, change.before, change.after) == ("u", "queued", None)


def test_ttl_entries_added_and_evicted() -> None:
    kept = {"tokens": [1, 2, 3, 4], "blocks": [0], "state": "hot"}
    old = {"tokens": [7, 7, 7, 7, 7], "blocks": [4, 5], "state": "warm"}
    new = {"tokens": [1, 2, 3, 4, 5, 6], "blocks": [0, 2], "state": "hot"}
    diff = round_diff(snapshot(1, (), [], [kept, old]), snapshot(2, (), [], [kept, new]))
    assert diff.cache_added == ("entry of 6 tokens (#0 #2)",)
    assert diff.cache_evicted == ("entry of 5 tokens (#4-#5)",)


def test_blocks_policy_cached_blocks_by_block_and_hash() -> None:
    def with_cached(*cached: tuple[int, str]) -> dict:
        shot = snapshot(1, (0, 0, 0), [])
        shot["config"] = {"cache_policy": "blocks"}  # its `cache` is an empty list
        shot["pool"]["cached"] = [{"block": b, "hash": h} for b, h in cached]
        return shot

    before, after = with_cached((0, "aa"), (1, "bb")), with_cached((0, "aa"), (1, "cc"))
    diff = round_diff(before, after)  # block 1 was evicted and cached again with a new hash
    assert diff.cache_added == ("block #1 hash cc",)
    assert diff.cache_evicted == ("block #1 hash bb",)


def radix(tree: dict) -> dict:
    return {"policy": "radix", "tree": {"tokens": [], "blocks": [], "children": [tree]}}


def test_a_radix_split_changes_nothing_and_an_eviction_is_seen() -> None:
    # One node of two blocks (block size 2), then the same span split in two nodes.
    whole = {"tokens": [1, 2, 3, 4], "blocks": [7, 8], "children": []}
    split = {
        "tokens": [1, 2],
        "blocks": [7],
        "children": [
            {"tokens": [3, 4], "blocks": [8], "children": []},
            {"tokens": [5, 6], "blocks": [9], "children": []},
        ],
    }
    one, two = snapshot(1, (), [], ()), snapshot(2, (), [], ())
    one["cache"], two["cache"] = radix(whole), radix(split)
    assert set(cache_entries(one)) == {("radix", 7, 2), ("radix", 8, 4)}
    diff = round_diff(one, two)
    assert diff.cache_added == ("block #9 (prefix of 4 tokens)",)  # only the new leaf
    assert diff.cache_evicted == ()
    back = round_diff(two, one)
    assert back.cache_evicted == ("block #9 (prefix of 4 tokens)",) and not back.cache_added


def test_the_same_snapshot_twice_is_an_empty_diff() -> None:
    shot = snapshot(5, (1, 2), [request("a", "decoding", [3])], [])
    diff = round_diff(shot, shot)
    assert diff.empty
    assert plain(diff_lines(diff, "clock +1s")) == ["t5 → t5 · clock +1s", "nothing changed"]
    assert "no earlier frame" in plain(diff_lines(None))[0]


def test_the_lines_name_every_change_and_a_narrow_pane_wraps_them_whole() -> None:
    before = snapshot(1, (1, 0, 1), [request("a", "decoding", [5, 6])])
    after = snapshot(2, (0, 1, 2), [request("a", "decoding", [5, 9, 9])])
    lines = diff_lines(round_diff(before, after), "step")
    assert plain(lines) == [
        "t1 → t2 · step",
        "tokens: +2 committed, -1 rolled back",
        "+ 1 block allocated: #1",
        "- 1 block freed: #0",
        "~ refcounts: #2 1→2",
        "a +[9 9] -[6]",
    ]
    narrow = plain(lines, width=12)
    assert all(len(row) <= 12 for row in narrow)
    assert " ".join(narrow).split() == " ".join(plain(lines)).split()  # every word, in order
    only_new = snapshot(2, (1, 0, 1), [request("a", "decoding", [5, 6, 1])])
    assert plain(diff_lines(round_diff(before, only_new)))[1] == "tokens: +1 committed"


def frames(**overrides: Any) -> Iterator[tuple[dict, dict, list[dict]]]:
    """Each round of the default scenario: the snapshot before, after, and its events."""
    session = Session(default_scenario().with_overrides(**overrides))
    before = session.snapshot()
    while session.can_step():
        session.step()
        after = session.snapshot()
        yield before, after, [e for e in session.engine.trace if e["tick"] == after["tick"]]
        before = after


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def test_every_round_of_the_scenario_agrees_with_its_events() -> None:
    """Real frames: the tokens the diff says were committed are the round's commit events'
    tokens, its cache additions and evictions its publish and evict events, and its allocated
    and freed blocks the pool's held blocks that came and went."""
    evictions = 0
    for before, after, events in frames():
        diff = round_diff(before, after)
        assert diff.committed == sum(len(e["tokens"]) for e in of(events, "commit"))
        assert diff.rolled_back == 0  # no rollbacks in the scenario's own rounds
        assert len(diff.cache_added) == len(of(events, "publish"))
        assert len(diff.cache_evicted) == len(of(events, "evict"))
        evictions += len(of(events, "evict"))
        held = [
            {b["id"] for b in shot["pool"]["blocks"] if b["refcount"]} for shot in (before, after)
        ]
        assert set(diff.allocated) == held[1] - held[0]
        assert set(diff.freed) == held[0] - held[1]
    assert evictions  # the scenario evicts: the check above saw some


SMALL_POOL = {"num_blocks": 8, "block_size": 2, "token_budget": 4}  # evicts under every policy


def block_ids(entries: tuple[str, ...]) -> list[int]:
    """The ids in "block #9 (prefix of 4 tokens)" lines."""
    return sorted(int(words.split()[1].lstrip("#")) for words in entries)


def test_radix_blocks_inserted_and_evicted_are_the_events_blocks() -> None:
    evicted = 0
    for before, after, events in frames(cache_policy="radix", **SMALL_POOL):
        diff = round_diff(before, after)
        added = sorted(b for e in of(events, "insert") for b in e["blocks"])
        gone = sorted(b for e in of(events, "evict") for b in e["blocks"])
        assert block_ids(diff.cache_added) == added and block_ids(diff.cache_evicted) == gone
        evicted += len(gone)
    assert evicted


def test_blocks_policy_changes_are_cached_and_evicted_events() -> None:
    """Net changes: a block evicted and cached again with the same hash in one round is no
    change, so the diff's entries are among the events' (and both are seen here)."""
    seen = {"added": 0, "evicted": 0}
    for before, after, events in frames(cache_policy="blocks", **SMALL_POOL):
        diff = round_diff(before, after)
        cached = {f"block #{e['block']} hash {e['hash']}" for e in of(events, "block_cached")}
        evicted = {f"block #{e['block']} hash {e['hash']}" for e in of(events, "block_evicted")}
        assert set(diff.cache_added) <= cached and set(diff.cache_evicted) <= evicted
        seen["added"] += len(diff.cache_added)
        seen["evicted"] += len(diff.cache_evicted)
    assert seen["added"] and seen["evicted"]


def test_the_live_memory_keeps_the_frame_before_the_last_operation() -> None:
    memory = FrameMemory()
    first, second, third = {"tick": 0}, {"tick": 1}, {"tick": 1, "again": True}
    assert memory.note(first, []) == {"previous": None, "since": ""}
    assert memory.note(second, [{"op": "step"}]) == {"previous": first, "since": "step"}
    # A redraw with no operation since: still against the frame before the step.
    assert memory.note(third, [{"op": "step"}])["previous"] is first
    cancel = {"op": "cancel", "id": "request-2"}
    assert memory.note(first, [{"op": "step"}, cancel]) == {
        "previous": third,
        "since": "cancel request-2",
    }


def test_the_live_diff_words_each_operation_as_a_replay_labels_its_frame() -> None:
    """One wording for both: what a rollback removed (not what was asked), a submit's id."""
    session, memory = Session(default_scenario()), FrameMemory()
    memory.note(session.snapshot(), session.operations)
    said = []

    def noted() -> str:
        since = memory.note(session.snapshot(), session.operations)["since"]
        said.append(since)
        return since

    for _ in range(3):
        session.step()
        assert noted() == "step"
    (view,) = [r for r in session.snapshot()["requests"] if r["id"] == "request-1"]
    generated = len(view["generated"])
    session.rollback("request-1", 100)
    assert noted() == f"roll back request-1 by {generated} tokens (asked for 100)"
    session.submit([5, 6, 7], max_tokens=3)
    assert noted() == "submit user-1"
    session.advance_clock(2)
    assert noted() == "clock +2s"
    session.step()
    assert noted() == "step"
    session.undo()
    assert noted() == "undo"
    frames = Replay(parse_trace(trace_data(session))).frames
    assert [frame.label for frame in frames[1:]] == said


def test_without_the_frame_right_before_a_rollback_says_what_was_asked() -> None:
    session, memory = Session(default_scenario()), FrameMemory()
    for _ in range(3):
        session.step()
    memory.note(session.snapshot(), session.operations)
    session.step()  # two operations between the app's frames: the step's tokens would count
    session.rollback("request-1", 100)
    since = memory.note(session.snapshot(), session.operations)["since"]
    assert since == "roll back request-1 by 100 tokens"


def test_a_run_of_blocks_whose_refcounts_moved_alike_reads_as_one_range() -> None:
    # Blocks 0-3 go 2->1 (a cache entry let go of them), 4 goes 1->2, 5-6 go 2->1 again:
    # three runs, the gap at 4 breaking the first.
    before = snapshot(1, (2, 2, 2, 2, 1, 2, 2), [])
    after = snapshot(2, (1, 1, 1, 1, 2, 1, 1), [])
    lines = plain(diff_lines(round_diff(before, after)))
    assert lines[1] == "~ refcounts: #0-#3 2→1 #4 1→2 #5-#6 2→1"
