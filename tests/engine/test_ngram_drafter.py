"""The n-gram (prompt-lookup) drafter: its pure proposal, and its trees in the engine."""

from __future__ import annotations

import pytest

from engine import (
    Engine,
    EngineConfig,
    NgramDrafter,
    SamplingParams,
    TinyModel,
    greedy_generate,
    make_draft,
)
from tests.engine.helpers import ManualClock, check_all_finished, drain, events_of


def test_it_proposes_what_followed_the_earliest_occurrence_of_the_longest_suffix() -> None:
    ngram = NgramDrafter(min_n=2, max_n=3)
    # Suffix [1, 2, 3] occurred at 0 (and at 5); the earliest wins; what followed it is 7, 8...
    tokens = [1, 2, 3, 7, 8, 1, 2, 3, 9, 1, 2, 3]
    assert ngram.match(tokens) == (0, 3)
    assert ngram.propose(tokens, 4) == [7, 8, 1, 2]
    assert ngram.propose(tokens, 1) == [7]
    # No 3-gram match: the 2-gram [5, 6] occurred at 1.
    assert ngram.match([4, 5, 6, 0, 9, 5, 6]) == (1, 2)
    assert ngram.propose([4, 5, 6, 0, 9, 5, 6], 3) == [0, 9, 5]
    # The followers may run into the suffix itself (an overlapping occurrence).
    assert ngram.propose([5, 5, 5], 4) == [5]
    # Nothing repeats, or the context is too short: no proposal.
    assert ngram.match([1, 2, 3, 4]) is None and ngram.propose([1, 2, 3, 4], 3) == []
    assert ngram.propose([1], 3) == [] and ngram.propose([1, 2, 1, 2], 0) == []
    assert NgramDrafter(min_n=1, max_n=1).propose([4, 1, 2, 4], 2) == [1, 2]
    assert NgramDrafter(min_n=3, max_n=3).match([1, 2, 9, 1, 2]) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [(dict(min_n=0), "min_n"), (dict(max_n=1.5), "max_n"), (dict(min_n=3, max_n=2), "max_n")],
)
def test_bad_ngram_sizes_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        NgramDrafter(**kwargs)


def test_an_engine_with_an_ngram_drafter_is_exact_and_records_its_match() -> None:
    target = TinyModel(seed=3)
    config = EngineConfig(draft_width=4)
    engine = Engine(target, NgramDrafter(1, 3), config=config, clock=ManualClock())
    assert engine.draft is None  # no draft model: nothing runs to propose
    # Every token occurs in the first prompt: every context has a match.
    prompts = [list(range(32)), [1, 2, 1, 2, 1, 2], [9, 9, 9]]
    for prompt in prompts:
        engine.submit(prompt, max_tokens=10)
    events, trees = [], []
    while not engine.idle:
        events.extend(engine.step())
        trees.extend(v["tree"] for v in engine.snapshot()["requests"] if v["tree"])
    check_all_finished(engine)
    drafts = events_of(events, "draft")
    assert drafts and engine.metrics()["work"]["draft_forwards"] == 0
    for draft in drafts:
        assert "ngram" in draft
        nodes = draft["nodes"][1:]
        assert all(n["prob"] == 1.0 for n in nodes)  # point masses
        assert [n["parent"] for n in nodes] == list(range(len(nodes)))  # a chain
        assert len(nodes) <= 4
    assert any("ngram" in tree for tree in trees)  # the request view's tree keeps the match


def test_the_ngram_match_points_into_the_context() -> None:
    target = TinyModel(seed=3)
    engine = Engine(target, NgramDrafter(min_n=1, max_n=3), clock=ManualClock())
    rid = engine.submit([4, 2, 4, 2, 4], max_tokens=6)
    seen = 0
    while not engine.idle:
        (events := engine.step())
        view = next(v for v in engine.snapshot()["requests"] if v["id"] == rid)
        for draft in events_of(events, "draft"):
            start, length = draft["ngram"]["start"], draft["ngram"]["length"]
            context = view["prompt"] + view["generated"]
            base = view["tree"]["base_position"] + 1  # the context the match was made in
            matched = context[start : start + length]
            assert matched == context[base - length : base]
            assert start + length < base
            assert [n["token"] for n in draft["nodes"][1:2]] == [context[start + length]]
            seen += 1
    assert seen > 0
    assert engine.result(rid).tokens == greedy_generate(target, [4, 2, 4, 2, 4], 6).tokens


def test_a_request_still_computing_its_prompt_gets_no_ngram_tree() -> None:
    """The first round computes the prompt: no tree then, even if the prompt repeats."""
    engine = Engine(TinyModel(seed=1), NgramDrafter(), clock=ManualClock())
    engine.submit([1, 2, 1, 2, 1, 2], max_tokens=4)
    first = engine.step()
    assert not events_of(first, "draft")
    (verify,) = events_of(first, "verify")
    assert [n["id"] for n in verify["nodes"]] == [0]


def test_sampled_requests_with_an_ngram_drafter_match_their_oracle() -> None:
    target = TinyModel(seed=4, vocab_size=8)
    engine = Engine(target, NgramDrafter(1, 2), config=EngineConfig(draft_width=3))
    for seed in range(6):
        engine.submit([1, 2, 1, 2], max_tokens=8, sampling=SamplingParams(0.8, seed=seed))
    drain(engine)
    check_all_finished(engine)
    assert engine.metrics()["drafts"]["accepted"] > 0


def test_a_draft_of_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="draft must be a TinyModel or an NgramDrafter"):
        Engine(TinyModel(), "ngram")  # type: ignore[arg-type]


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_a_prompt_computed_in_chunks_gets_no_tree_until_its_first_token(draft: str) -> None:
    """With chunked prefill a request spends rounds computing its prompt: no tree then, from
    either drafter; sampled, it still matches its oracle."""
    target = TinyModel(seed=2)
    drafter = NgramDrafter(1, 3) if draft == "ngram" else make_draft(target, seed=3)
    config = EngineConfig(long_prefill_threshold=3, draft_width=3)
    engine = Engine(target, drafter, config=config, clock=ManualClock())
    rid = engine.submit(list(range(12)) * 2, max_tokens=6, sampling=SamplingParams(0.9, seed=4))
    chunks, drafted, before = 0, 0, 0
    while not engine.idle:
        events = engine.step()
        view = next(v for v in engine.snapshot()["requests"] if v["id"] == rid)
        if events_of(events, "draft"):  # only once a token is pending at the round's start
            assert before > 0, "a request still computing its prompt got a tree"
            drafted += 1
        chunks += not view["generated"]
        before = len(view["generated"])
    assert chunks >= 3 and drafted > 0  # the 24-position prompt took several rounds
    check_all_finished(engine)
