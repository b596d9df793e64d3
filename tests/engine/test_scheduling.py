"""The token budget, chunked prefill and the schedule policies (issue 22).

One budget per round covers every target row (prefill chunks, pending positions, verified draft
nodes), as vLLM v1's scheduler spends `max_num_batched_tokens`: running requests first, then
prefills in progress, then new admissions. Tokens never depend on the budget or the policy.
"""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from tests.engine.helpers import (
    ManualClock,
    check_all_finished,
    check_block_invariants,
    events_of,
    request_view,
)

BLOCK = 4
BUDGETS = [1, 2, 3, BLOCK - 1, BLOCK, BLOCK + 1, 64, None]
PROMPTS = [
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    [1, 2, 3, 4, 5, 6, 20, 21],
    [7] * 19,
    [3, 1],
]


def build(
    draft: str = "none", *, window: int = 4, clock: ManualClock | None = None, **config: object
) -> Engine:
    target = TinyModel(seed=5, window=window)
    drafts = {
        "none": None,
        "early exit": make_draft(target, seed=9),  # reads the target's rows
        "own rows": TinyModel(seed=9, window=window, depth=1),  # keeps rows of its own
    }
    settings = dict(block_size=BLOCK, num_blocks=64, max_active=3)
    settings.update(config)
    return Engine(
        target, drafts[draft], config=EngineConfig(**settings), clock=clock or ManualClock()
    )


def run_checked(engine: Engine, max_rounds: int = 400) -> list[dict]:
    events = []
    for _ in range(max_rounds):
        if engine.idle:
            break
        events += engine.step()
        check_block_invariants(engine)
    assert engine.idle
    return events


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("window", [2, 4])
@pytest.mark.parametrize("draft", ["none", "early exit", "own rows"])
@pytest.mark.parametrize("policy", ["fcfs", "priority", "lpm"])
def test_every_budget_policy_and_draft_gives_the_oracles_tokens_and_state(
    budget: int | None, window: int, draft: str, policy: str
) -> None:
    engine = build(
        draft, window=window, token_budget=budget, schedule_policy=policy, draft_branching=2
    )
    for index, prompt in enumerate(PROMPTS):
        engine.submit(prompt, max_tokens=5, priority=-index)
    events = run_checked(engine)
    results = check_all_finished(engine)
    assert [r.finish_reason for r in results] == ["length"] * len(PROMPTS)
    for event in events_of(events, "schedule"):
        assert budget is None or event["rows"] <= budget
    chunked = budget is not None and budget < len(PROMPTS[2])
    prefills = [e for e in events_of(events, "prefill") if e["request_id"] == "request-3"]
    assert (len(prefills) > 1) == chunked


def test_a_prompt_is_computed_in_contiguous_chunks_and_commits_only_when_complete() -> None:
    engine = build(token_budget=5)
    rid = engine.submit(list(range(1, 13)), max_tokens=3)
    chunks, tokens_seen = [], []
    while not engine.idle:
        events = engine.step()
        view = request_view(engine.snapshot(), rid)
        for event in events_of(events, "prefill"):
            chunks.append((event["start"], event["stop"], event["total"]))
        tokens_seen.append(len(view["generated"]))
        if view["state"] == "prefilling":
            assert not events_of(events, "commit") and not events_of(events, "draft")
            assert view["computed_positions"] == chunks[-1][1]
            assert view["prefill_total"] == 12
    # 5 rows, 5 rows, then the last 2 with the pending position: the first token.
    assert chunks == [(0, 5, 12), (5, 10, 12), (10, 12, 12)]
    assert tokens_seen[:3] == [0, 0, 1]
    check_all_finished(engine)


def test_long_prefill_threshold_caps_one_requests_chunk() -> None:
    engine = build(token_budget=64, long_prefill_threshold=4)
    engine.submit(list(range(1, 11)), max_tokens=2)
    events = run_checked(engine)
    spans = [(e["start"], e["stop"]) for e in events_of(events, "prefill")]
    assert spans == [(0, 4), (4, 8), (8, 10)]
    check_all_finished(engine)


def test_running_requests_are_served_before_a_long_prompt_takes_the_rest() -> None:
    # vLLM v1: decodes first, so a long arrival does not stall requests already decoding.
    engine = build(token_budget=8, max_active=4)
    short = [engine.submit([i, i + 1], max_tokens=12) for i in range(3)]
    engine.step()
    long = engine.submit([i % 32 for i in range(40)], max_tokens=2)
    events = engine.step()
    (schedule,) = events_of(events, "schedule")
    parts = {p["request_id"]: p for p in schedule["requests"]}
    assert [parts[r]["decode"] for r in short] == [1, 1, 1]
    assert parts[long]["prefill"] == 5  # what the three pending positions left of 8
    assert schedule["rows"] == 8
    run_checked(engine)
    check_all_finished(engine)


def test_a_request_left_without_budget_waits_and_says_why() -> None:
    engine = build(token_budget=1, max_active=2)
    first = engine.submit([1, 2], max_tokens=4)
    engine.step()
    engine.step()  # first now decodes: its pending position takes the whole budget
    second = engine.submit([5, 6, 7], max_tokens=1)
    engine.step()
    view = request_view(engine.snapshot(), second)
    assert view["state"] == "queued"
    assert "token budget (1)" in view["waiting_for"] and "fcfs" in view["waiting_for"]
    assert request_view(engine.snapshot(), first)["state"] == "decoding"
    run_checked(engine)
    check_all_finished(engine)


def admission_order(policy: str, warm: list[int] | None = None) -> list[str]:
    """The order in which four queued requests are first admitted, one at a time."""
    engine = build(schedule_policy=policy, max_active=1)
    if warm is not None:
        engine.generate(warm, max_tokens=0)  # caches this prefix
    prompts = [[9, 9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 30], [8, 8, 8]]
    priorities = [2, 0, 1, 0]
    for index, (prompt, priority) in enumerate(zip(prompts, priorities)):
        engine.submit(prompt, max_tokens=1, request_id=f"q{index}", priority=priority)
    events = run_checked(engine)
    check_all_finished(engine)
    return [e["request_id"] for e in events_of(events, "restore") if e["request_id"][0] == "q"]


def test_golden_admission_orders_of_each_policy() -> None:
    assert admission_order("fcfs") == ["q0", "q1", "q2", "q3"]
    # Smaller priority first, ties by arrival (vLLM's priority policy).
    assert admission_order("priority") == ["q1", "q3", "q2", "q0"]
    # Longest cached prefix first (SGLang's lpm): q1 shares 6 cached positions, q2 three.
    assert admission_order("lpm", warm=[1, 2, 3, 4, 5, 6, 0]) == ["q1", "q2", "q0", "q3"]
    assert admission_order("lpm") == ["q0", "q1", "q2", "q3"]  # nothing cached: arrival


def test_tokens_never_depend_on_the_policy_or_the_budget() -> None:
    outputs = set()
    for policy in ("fcfs", "priority", "lpm"):
        for budget in (2, None):
            engine = build(schedule_policy=policy, token_budget=budget)
            for index, prompt in enumerate(PROMPTS):
                engine.submit(prompt, max_tokens=4, priority=index % 2)
            outputs.add(tuple(result.tokens for result in engine.run()))
    assert len(outputs) == 1


def preempted_run(policy: str) -> tuple[Engine, list[dict]]:
    engine = build(schedule_policy=policy, num_blocks=6, max_active=3, undo_depth=0)
    engine.submit([1, 2, 3, 4, 5, 6], max_tokens=6, request_id="low", priority=5)
    engine.submit([7, 8, 9], max_tokens=8, request_id="high", priority=0)
    engine.submit([4, 4], max_tokens=8, request_id="mid", priority=1)
    return engine, run_checked(engine)


def test_the_preemption_victim_follows_the_policy_and_the_reason_names_the_rule() -> None:
    engine, events = preempted_run("fcfs")
    first = events_of(events, "preempt")[0]
    assert first["request_id"] == "mid"
    assert "fcfs: mid was the most recently admitted" in first["reason"]
    check_all_finished(engine)
    engine, events = preempted_run("priority")
    first = events_of(events, "preempt")[0]
    assert first["request_id"] == "low"
    assert "priority: low has the lowest priority (5)" in first["reason"]
    check_all_finished(engine)


def test_a_preempted_request_restores_what_the_cache_kept_of_its_prefix() -> None:
    # The victim offers its computed prefix to the cache; nobody new is admitted while the
    # request that needed the space waits for it, and what the cache still holds when the
    # victim comes back is restored instead of recomputed (vLLM finds it by block hash).
    engine = build(num_blocks=5, max_active=2, undo_depth=0, state_ttl=100.0)
    engine.submit([21, 2], max_tokens=4)
    engine.submit([17, 8, 15, 30, 22, 18, 22, 8, 19], max_tokens=8)
    engine.submit([26, 5, 0, 12, 21, 10, 15], max_tokens=7)
    events = run_checked(engine)
    preempt = next(e for e in events_of(events, "preempt") if e["kept_positions"])
    victim = preempt["request_id"]
    assert preempt["kept_positions"] == preempt["lost_positions"] == 12
    assert preempt["recompute_positions"] == 1  # only the pending position
    after = events[events.index(preempt) :]
    (restore, *_) = [e for e in events_of(after, "restore") if e["request_id"] == victim]
    assert restore["cache"] == "hot" and restore["reused_positions"] == 12
    check_all_finished(engine)


def test_a_request_kept_waiting_behind_one_short_of_blocks_says_so_in_the_past() -> None:
    # While an admitted request lacks free blocks nobody new is admitted; the waiting one's
    # reason is read after the round, when the short one may have its blocks: it says what
    # held at the round's start, never that the other still waits.
    engine = build(num_blocks=5, max_active=3, undo_depth=0, state_ttl=100.0)
    for prompt, max_tokens in ([21, 2], 4), ([17, 8, 15, 30, 22, 18, 22, 8, 19], 8):
        engine.submit(prompt, max_tokens=max_tokens)
    engine.submit([26, 5, 0, 12, 21, 10, 15], max_tokens=7, request_id="short")
    behind = []
    while not engine.idle:
        engine.step()
        views = {view["id"]: view for view in engine.snapshot()["requests"]}
        for view in views.values():
            if "short lacked" in (view["waiting_for"] or ""):
                behind.append((view["waiting_for"], views["short"]["needs_blocks"]))
    assert behind, "the crafted pool keeps a request waiting behind the short one"
    assert {needs for _, needs in behind} >= {0}  # read after the short one got its blocks
    for why, _ in behind:
        assert why.startswith("room: short lacked 2 free blocks as the round began"), why
    check_all_finished(engine)


def test_a_request_admitted_and_squeezed_out_in_one_round_is_not_preempted() -> None:
    # As vLLM schedules the running requests before new ones and leaves a new request waiting
    # when they took the space, a request admitted in the round whose room it then gives back
    # never ran: it waits ("deferred"), it is not preempted, and its tokens stay the oracle's.
    engine = Engine(
        TinyModel(seed=2), config=EngineConfig(token_budget=6, block_size=4, num_blocks=8)
    )
    engine.submit(list(range(1, 11)), max_tokens=6, request_id="a")
    engine.submit([3] * 9, max_tokens=8, request_id="b")
    engine.submit([5] * 3, max_tokens=3, request_id="c")
    events = run_checked(engine)
    of_c = [e for e in events if e["request_id"] == "c"]
    admitted = {e["tick"] for e in of_c if e["kind"] == "restore"}
    ran = {
        e["tick"]
        for e in events
        if e["kind"] == "schedule" and any(p["request_id"] == "c" for p in e["requests"])
    }
    gave_back = [
        e for e in of_c if e["kind"] == "deferred" and "gave its place back" in e["reason"]
    ]
    assert gave_back, "the crafted pool squeezes c out in a round that admitted it"
    for event in gave_back:
        assert event["tick"] in admitted and event["tick"] not in ran
        assert "fcfs: c was the most recently admitted" in event["reason"]
    preempted = [e["tick"] for e in of_c if e["kind"] == "preempt"]
    # Every preemption took a request that had run since its last admission.
    for tick in preempted:
        last_admission = max(t for t in admitted if t < tick)
        assert any(last_admission <= t < tick for t in ran)
    view = next(v for v in engine.snapshot()["requests"] if v["id"] == "c")
    assert preempted and view["preemptions"] == len(preempted)
    serving = engine.metrics()["serving"]
    assert serving["preemptions"] == engine.metrics()["requests"]["preemptions"] == len(preempted)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("token_budget", 0, "token_budget must be a positive integer"),
        ("token_budget", 2.5, "token_budget must be a positive integer"),
        ("long_prefill_threshold", 0, "long_prefill_threshold must be a positive integer"),
        ("schedule_policy", "sjf", "unknown schedule_policy 'sjf'"),
    ],
)
def test_bad_schedule_settings_are_refused_naming_the_field(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{field: value})


@pytest.mark.parametrize("priority", [1.5, "1", True, None])
def test_a_non_integer_priority_is_refused_and_changes_nothing(priority: object) -> None:
    engine = build()
    before = engine.snapshot()
    with pytest.raises(ValueError, match="priority must be an integer"):
        engine.submit([1, 2], priority=priority)  # type: ignore[arg-type]
    assert engine.snapshot() == before
