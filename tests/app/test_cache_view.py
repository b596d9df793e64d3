"""The prefix-cache view's lines (key 2) for each cache policy, from real engines (issue 24)."""

from __future__ import annotations

from typing import Any

from deepinfer_tui.cache_view import cache_lines
from deepinfer_tui.export import render_document
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session
from engine import Engine, EngineConfig, TinyModel
from tests.app.helpers import plain


def engine_with(policy: str, clock: list[float] | None = None, **config: Any) -> Engine:
    settings: dict[str, Any] = dict(block_size=2, num_blocks=8, undo_depth=0) | config
    now = clock or [0.0]
    return Engine(
        TinyModel(seed=3),
        config=EngineConfig(cache_policy=policy, **settings),
        clock=lambda: now[0],
    )


def run(engine: Engine, prompt: list[int], max_tokens: int = 1) -> str:
    request_id = engine.submit(prompt, max_tokens=max_tokens)
    while engine.snapshot()["queue"] or any(
        r["status"] != "finished" for r in engine.snapshot()["requests"]
    ):
        engine.step()
    return request_id


def request_view(engine: Engine, request_id: str) -> dict:
    return next(r for r in engine.snapshot()["requests"] if r["id"] == request_id)


def test_ttl_lists_each_entry_with_its_state_length_blocks_and_times() -> None:
    clock = [0.0]
    engine = engine_with("ttl", clock, state_ttl=1.0, prefix_ttl=5.0)
    run(engine, [1, 2, 3])  # publishes [1 2 3] (and its token): one entry
    shown = plain(cache_lines(engine.snapshot(), None, engine.trace, 80))
    assert shown[0] == "● hot  ◐ warm  ○ expired"
    assert shown[1] == "ttl cache: 1 entry"
    entry = engine.snapshot()["cache"][0]
    assert shown[2].startswith(f"● hot     {len(entry['tokens'])} tokens [1 2 3")
    assert shown[3] == "└ #0-#1 · hot until 1s · warm until 5s"
    clock[0] = 2.0
    assert plain(cache_lines(engine.snapshot(), None, engine.trace, 80))[2].startswith("◐ warm")
    clock[0] = 5.0
    assert plain(cache_lines(engine.snapshot(), None, engine.trace, 80))[2].startswith("○ expired")


def test_ttl_without_entries_says_the_cache_is_empty() -> None:
    engine = engine_with("ttl")
    shown = plain(cache_lines(engine.snapshot(), None, engine.trace, 80))
    assert shown[-1] == "ttl cache: empty (a request publishes its prefix)"


def test_blocks_draws_the_free_queue_and_the_hash_chain_with_its_hits() -> None:
    engine = engine_with("blocks")
    run(engine, [1, 2, 3, 4, 5, 6, 7])  # caches the full blocks [1 2] [3 4] [5 6] (and [7 x])
    second = engine.submit([1, 2, 3, 4, 9, 9, 9], max_tokens=3)
    engine.step()
    snapshot = engine.snapshot()
    request = request_view(engine, second)
    hits = request["restore"]["hit_blocks"]
    assert len(hits) == 2  # [1 2] [3 4]
    shown = plain(cache_lines(snapshot, request, engine.trace, 80))
    assert shown[0] == "▒ cached  · free  ✓ hit  ■ hashed  - partial"
    queue = snapshot["pool"]["free_queue"]
    cached = {entry["block"] for entry in snapshot["pool"]["cached"]}
    strip = "".join("▒" if block in cached else "·" for block in queue)
    assert shown[2] == f"head {strip} tail"  # head first: the next block taken
    assert "▒" in strip  # [5 6] was cached and is free: it waits in the queue
    first_cached = next(block for block in queue if block in cached)
    assert (
        shown[3] == f"next evicted: #{first_cached} ({queue.index(first_cached) + 1} from the head)"
    )
    chain = shown[shown.index(f"{second}: restore hot, hit #{hits[0]}-#{hits[1]}") + 1 :]
    blocks = request["blocks"]
    assert chain[0] == f"✓ #{blocks[0]['id']:<3} {blocks[0]['hash']} ← root"
    assert chain[1] == f"✓ #{blocks[1]['id']:<3} {blocks[1]['hash']} ← {blocks[0]['hash']}"
    for line, block in zip(chain[2:], blocks[2:], strict=True):  # computed by this request
        expected = f"{block['hash']} ← " if block["hash"] else "partial: not cached"
        assert line.startswith(("■ " if block["hash"] else "- ") + f"#{block['id']:<3} {expected}")


def test_blocks_shortens_a_long_free_queue_to_its_head_and_a_count() -> None:
    engine = engine_with("blocks", num_blocks=400)
    shown = plain(cache_lines(engine.snapshot(), None, engine.trace, 40))
    strip = [line for line in shown if line.startswith(("head", "     "))]
    assert len(strip) == 4
    assert strip[-1] == f"     … {400 - 3 * 30} more, 0 of them cached … tail"
    assert shown[-1] == "no request selected: its blocks' hash chain shows here"


def test_radix_draws_the_tree_marks_the_match_and_lists_this_rounds_evictions() -> None:
    engine = engine_with("radix")
    run(engine, [1, 2, 3, 4, 5, 6, 7])
    run(engine, [1, 2, 3, 4, 9, 9, 9])  # splits the node [1 2 3 4 5 6] after [1 2 3 4]
    third = run(engine, [1, 2, 3, 4, 5, 6, 7])
    request = request_view(engine, third)
    shown = plain(cache_lines(engine.snapshot(), request, engine.trace, 80))
    assert shown[0] == "◆ matched  ○ node  ✗ evicted"
    tree = engine.snapshot()["cache"]["tree"]
    shared = tree["children"][0]
    assert shared["tokens"] == [1, 2, 3, 4]
    hits = request["restore"]["hit_blocks"]
    assert shown[1] == "radix tree: 3 nodes · [span …] (length) blocks, lock N, @last access"
    blocks = " ".join(f"#{b}" for b in shared["blocks"]).replace(" #", "-#", 1)
    assert shown[2] == f"└─◆ [1 2 3 4] (4) {blocks} lock 0 @{shared['last_access']}"
    children = {tuple(child["tokens"]): child for child in shared["children"]}
    lines = {line[6:12]: line for line in shown[3:5]}
    assert set(lines) == {"[5 6] ", "[9 9] "}
    assert lines["[5 6] "].startswith(("  ├─◆", "  └─◆"))  # matched by the third request
    assert lines["[9 9] "].startswith(("  ├─○", "  └─○"))
    assert lines["[9 9] "].endswith(f"lock 0 @{children[(9, 9)]['last_access']}")
    assert shown[5] == f"{third} matched #{hits[0]}-#{hits[-1]}"
    narrow = plain(cache_lines(engine.snapshot(), request, engine.trace, 26))
    assert narrow[:2] == ["◆ matched ○ node ✗ evicted", "radix tree: 3 nodes"]  # 80x24's pane
    assert shown[-1] == f"no eviction in round t{engine.snapshot()['tick']}"
    # A long prompt needs the tree's blocks: this round's evictions are listed, oldest first.
    engine.submit([7] * 13, max_tokens=1)
    engine.step()
    shown = plain(cache_lines(engine.snapshot(), None, engine.trace, 80))
    start = shown.index(f"evicted in round t{engine.snapshot()['tick']}:")
    evicted = shown[start + 1 :]
    assert evicted[0] == f"✗ #{children[(9, 9)]['blocks'][0]} (2 positions), evicted for space"
    assert len(evicted) == 3


def test_the_export_shows_the_prefix_cache_of_the_policy_in_use() -> None:
    for policy, shown in (("blocks", "free queue "), ("radix", "└─○ [1 2 3 4] (4) #0 lock 0")):
        session = Session(default_scenario().with_overrides(cache_policy=policy))
        for _ in range(4):
            session.step()
        text = render_document(session)["txt"]
        section = text[text.index(f"Prefix cache · {policy}") : text.index("Commit log")]
        assert shown in section, section
    session = Session(default_scenario())  # ttl: the entries' table, as before
    session.step()
    text = render_document(session)["txt"]
    assert "Prefix cache" in text and "hot until" in text
