"""The draft tree's words (issue 23): each node's label and numbers, the replacement's
distribution and the n-gram match, from crafted nodes and from real engines' trees."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from deepinfer_tui.legend import DRAFT_TERMS, VERDICT_MARKS, full_legend
from deepinfer_tui.tree_view import node_label, replacement_line, tree_words
from engine import Engine, EngineConfig, NgramDrafter, SamplingParams, TinyModel, make_draft


def node(**fields: Any) -> dict[str, Any]:
    base = {"id": 1, "parent": 0, "depth": 1, "token": 7, "prob": 0.42, "target_token": None}
    return {**base, **fields}


def two_places(value: float) -> str:
    """0.416 -> '.42', 1.0 -> '1.00': how the pane writes a probability."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def styled(text: Text, style_word: str) -> list[str]:
    """The pieces of `text` whose style mentions `style_word`."""
    return [text.plain[s.start : s.end] for s in text.spans if style_word in str(s.style)]


def test_a_greedy_nodes_label_shows_the_drafts_probability_and_the_targets_token() -> None:
    assert node_label(node(verdict="accepted", target_token=7)).plain == "✓ 7 q.42"
    assert node_label(node(verdict="rejected", target_token=20)).plain == "✗ 7 q.42 target 20"
    assert node_label(node(verdict="unverified", prob=1.0)).plain == "? 7 q1.00 unverified"


def test_a_discarded_node_is_drawn_discarded_not_rejected() -> None:
    # Below a rejected node: the target's token there (20 here) was never a verdict on it.
    label = node_label(node(token=20, prob=0.17, verdict="discarded")).plain
    assert label == "⊘ 20 q.17 discarded"
    assert VERDICT_MARKS["discarded"].symbol == "⊘"
    assert "target" not in label and VERDICT_MARKS["rejected"].symbol not in label


def test_a_rejection_checks_label_shows_p_q_the_draw_and_the_acceptance_probability() -> None:
    check = {"p": 0.447738, "q": 0.851159, "draw": 0.639003, "accept_prob": 0.526033}
    rejected = node(token=26, verdict="rejected", target_token=5, **check)
    assert node_label(rejected, rejection=True).plain == "✗ 26 p.45 q.85 u.64≥.53 target 5"
    kept = {"p": 0.027176, "q": 0.017729, "draw": 0.185131, "accept_prob": 1.0}
    accepted = node(token=25, verdict="accepted", target_token=25, **kept)
    assert node_label(accepted, rejection=True).plain == "✓ 25 p.03 q.02 u.19<1.00"
    # The draft ranked these by max q, not q(x): a node without a check shows no number.
    assert node_label(node(verdict="unverified"), rejection=True).plain == "? 7 unverified"
    # Its check (computed below a rejected node) is no verdict: none of it is shown.
    discarded = node(verdict="discarded", p=0.17, q=0.35, draw=0.31, accept_prob=0.49)
    assert node_label(discarded, rejection=True).plain == "⊘ 7 discarded"


def test_a_coupled_checks_label_shows_p_and_the_drafts_q() -> None:
    check = {"p": 0.5, "q": None, "draw": None, "accept_prob": 0.5}
    rejected = node(token=26, prob=0.77, verdict="rejected", target_token=5, **check)
    assert node_label(rejected).plain == "✗ 26 p.50 q.77 target 5"


def test_the_replacement_line_lists_the_top_and_bolds_the_drawn_token() -> None:
    rejected = node(
        verdict="rejected",
        target_token=7,
        replacement_top=[[5, 0.640684], [7, 0.08793], [29, 0.050563], [20, 0.045502]],
    )
    line = replacement_line(rejected)
    assert line.plain == "5 .64 · 7 .09 · 29 .05 · 20 .05"
    assert styled(line, "bold") == ["7"]
    assert replacement_line(rejected, 2).plain == "5 .64 · 7 .09"


def rejection_trees() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request view, tree) of every verified tree of sampled requests under rejection
    sampling (chains)."""
    target = TinyModel(seed=4, vocab_size=8)
    config = EngineConfig(draft_acceptance="rejection", draft_width=4, undo_depth=0)
    engine = Engine(target, make_draft(target, seed=5, noise=0.5), config=config)
    for seed in range(6):
        engine.submit([1, 2], max_tokens=8, sampling=SamplingParams(1.0, seed=seed))
    trees = []
    while not engine.idle:
        engine.step()
        for view in engine.snapshot()["requests"]:
            tree = view["tree"]
            if tree and tree["round"] == engine.tick and len(tree["nodes"]) > 1:
                trees.append((view, tree))
    return trees


def test_real_rejection_trees_show_each_verified_nodes_numbers_and_verdict() -> None:
    trees = rejection_trees()
    verdicts = set()
    for view, tree in trees:
        words = tree_words(view, tree)
        assert words.rejection and words.replacement_from == "max(p−q,0)"
        for each in tree["nodes"][1:]:
            label = node_label(each, words.rejection).plain
            verdicts.add(each["verdict"])
            if each["verdict"] not in ("accepted", "rejected"):
                assert " p." not in label and " u" not in label
                continue
            p, q, u = two_places(each["p"]), two_places(each["q"]), two_places(each["draw"])
            assert f" p{p} q{q} u{u}" in label
            # u < min(1, p/q) is the acceptance: the comparison shown is the verdict.
            sign = "<" if each["verdict"] == "accepted" else "≥"
            assert f"{sign}{two_places(min(1.0, each['p'] / each['q']))}" in label
        source = words.replacement_source
        if source is not None:  # the residual's top never offers the rejected token
            listed = replacement_line(source).plain.split(" · ")
            assert all(not item.startswith(f"{source['token']} ") for item in listed)
    assert {"accepted", "rejected", "discarded"} <= verdicts


def ngram_engine_trees() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request view, tree) of every round an NgramDrafter drafted."""
    engine = Engine(TinyModel(seed=3), NgramDrafter(1, 3), config=EngineConfig(draft_width=4))
    engine.submit([*range(12), 5, 6], max_tokens=8)
    found = []
    while not engine.idle:
        engine.step()
        view = engine.snapshot()["requests"][0]
        tree = view["tree"]
        if tree and tree.get("ngram") and tree["round"] == engine.tick:
            found.append((view, tree))
    return found


def test_the_ngram_match_is_named_and_highlighted_in_its_context() -> None:
    found = ngram_engine_trees()
    assert found
    for view, tree in found:
        # The round was drafted from the tokens up to the root (later ones came after it).
        context = [*view["prompt"], *view["generated"]][: tree["base_position"] + 1]
        start, length = tree["ngram"]["start"], tree["ngram"]["length"]
        matched = context[start : start + length]
        assert matched == context[len(context) - length :]
        head, strip = tree_words(view, tree).ngram
        words = " ".join(str(t) for t in matched)
        assert head.plain.startswith(f"{VERDICT_MARKS['ngram'].symbol} n-gram [{words}] at ")
        assert f"the last {length} at {len(context) - length}" in head.plain
        # Both occurrences in reverse video; the draft (what followed) underlined.
        end = len(context)
        both = sorted(set(range(start, start + length)) | set(range(end - length, end)))
        assert styled(strip, "reverse") == [str(context[p]) for p in both]
        drafted = [str(n["token"]) for n in tree["nodes"][1:]]
        underlined = styled(strip, "underline")
        if start + length < end - length:  # a follower before the context's end
            assert underlined and underlined == drafted[: len(underlined)]


def test_a_tree_without_an_ngram_match_has_no_ngram_lines() -> None:
    words = tree_words({"prompt": [1, 2, 3]}, {"nodes": [node(verdict="root")]})
    assert words.ngram == ()
    assert not words.rejection and words.replacement_source is None
    assert words.replacement_from == "p"  # coupled acceptance draws from p itself


def test_the_help_legend_explains_every_mark_and_number_the_tree_uses() -> None:
    legend = full_legend().plain
    for mark in ("discarded", "ngram"):
        assert VERDICT_MARKS[mark].meaning in legend
    for term in ("q.42", "p.42", "u.31<.78", "~ p, ~ max(p−q,0)"):
        assert term in DRAFT_TERMS and term in legend
