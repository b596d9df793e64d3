"""The batched forward with its fast paths on and off: every batch shape the engine makes gives
the same rows both ways (within 1e-12), and both equal `full_forward` (within 1e-10).

Each scenario drives `forward_rows` the way the engine does, feeding each mode its own rows
back as a draft's earlier levels. The plain runs happen with the fast paths' entry points made
to fail (so `fast_paths=False` provably never reaches them); the fast runs are watched to take
the trick each scenario is about (so the grid covers every one of them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest

from engine import Engine, EngineConfig, TinyModel, make_draft
from engine.model import tinymodel as tinymodel_module
from engine.model.fastpaths import WorkBuffers
from engine.model.fastpaths import forward as forward_module
from engine.rows import BatchContext, RowBatchItem, Rows
from tests.engine.helpers import TOLERANCE, ManualClock, check_all_finished, drain
from tests.engine.model_helpers import bounded_prefill, chain_item, max_difference, replay_item

SAME = 1e-12  # fast against plain: the same arithmetic up to summation order


class Oracle:
    """Full recompute of token paths, memoised (both modes are held to the same rows)."""

    def __init__(self, model: TinyModel) -> None:
        self.model = model
        self.cache: dict[tuple[int, ...], Rows] = {}

    def rows(self, tokens: tuple[int, ...]) -> Rows:
        if tokens not in self.cache:
            self.cache[tokens] = self.model.full_forward(tokens)
        return self.cache[tokens]


@dataclasses.dataclass
class Run:
    """One mode's pass through a scenario: each computed row set beside the rows it must be."""

    model: TinyModel
    oracle: Oracle
    fast_paths: bool
    pairs: list[tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=list)

    def forward(self, items: list[RowBatchItem], context: BatchContext | None = None) -> list[Rows]:
        return self.model.forward_rows(items, context, fast_paths=self.fast_paths)

    def context(self, items: list[RowBatchItem], tail: int) -> BatchContext:
        return self.model.batch_context(items, tail=tail, fast_paths=self.fast_paths)

    def expect(self, out: Rows, want: np.ndarray) -> None:
        self.pairs.append((out.data, want))


def sequence(seed: int, length: int, vocab: int = 32) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, vocab, length))


def next_level(first: RowBatchItem, rows: Rows, tokens: tuple[int, ...], new: int) -> RowBatchItem:
    """A draft level: `new` chain rows after the rows an earlier call computed for `first`."""
    start = int(first.positions[-1]) + 1
    done = len(first.tokens) + len(first.earlier_positions)
    earlier = rows if first.earlier is None else Rows.concat([first.earlier, rows])
    return dataclasses.replace(
        first,
        tokens=np.array(tokens[start : start + new], dtype=np.int64),
        positions=np.arange(start, start + new),
        parents=np.arange(done, done + new) - 1,
        earlier=earlier,
        earlier_positions=np.concatenate([first.earlier_positions, first.positions]),
        earlier_parents=np.concatenate([first.earlier_parents, first.parents]),
        earlier_full=np.ones(done, dtype=bool),
    )


def tree_item(
    run: Run, prefix: tuple[int, ...], nodes: list[tuple[int, int]]
) -> tuple[RowBatchItem, list[tuple[int, ...]]]:
    """A draft tree after a committed prefix (its last position recomputed as the root):
    nodes are (parent row, token) in breadth-first order; also every node's token path."""
    paths: list[tuple[int, ...]] = []
    for parent, token in nodes:
        paths.append((*(paths[parent] if parent >= 0 else prefix[:-1]), token))
    stored = len(prefix) - 1
    item, _ = chain_item(run.model, prefix, stored, full=run.oracle.rows(prefix))
    return dataclasses.replace(
        item,
        tokens=np.array([token for _, token in nodes]),
        positions=np.array([len(path) - 1 for path in paths]),
        parents=np.array([parent for parent, _ in nodes]),
    ), paths


def chain(run: Run, tokens: tuple[int, ...], stored: int, key: object = None) -> RowBatchItem:
    full = run.oracle.rows(tokens)
    return chain_item(run.model, tokens, stored, context_key=key, full=full)[0]


# -- the scenarios: each the shape of some engine round ------------------------------------------


def decode_steps(run: Run) -> None:
    """Rounds of one new row per request (the chain path), contexts growing under their keys
    while the batch reorders and shrinks (padded rows kept across calls)."""
    sequences = [sequence(i, 30 + 7 * i) for i in range(4)]
    stored = [5 + 3 * i for i in range(4)]
    for order in ([0, 1, 2, 3], [2, 0, 3, 1], [3, 1], [0, 1, 2, 3]):
        items = [chain(run, sequences[i][: stored[i] + 1], stored[i], key=i) for i in order]
        for i, out in zip(order, run.forward(items)):
            run.expect(out, run.oracle.rows(sequences[i]).data[stored[i] : stored[i] + 1])
            stored[i] += 1


def chain_verification(run: Run) -> None:
    """Every request checks a chain of four drafted tokens after its stored rows."""
    sequences = [sequence(10 + i, 24) for i in range(3)]
    items = [chain(run, s[: 9 + 2 * i + 4], 9 + 2 * i) for i, s in enumerate(sequences)]
    for i, out in enumerate(run.forward(items)):
        run.expect(out, run.oracle.rows(sequences[i][: 13 + 2 * i]).data[9 + 2 * i :])


def draft_levels(run: Run) -> None:
    """A draft grows chains level by level over one padded context (the engine's round)."""
    sequences = [sequence(20 + i, 30) for i in range(3)]
    stored = [6, 11, 3]
    items = [chain(run, s[: c + 1], c, key=i) for i, (s, c) in enumerate(zip(sequences, stored))]
    context = run.context(items, tail=8)
    for new in (1, 2, None):  # levels of one row, one row, two rows
        outputs = run.forward(items, context)
        for item, out, tokens in zip(items, outputs, sequences):
            run.expect(out, run.oracle.rows(tokens).data[item.positions])
        if new is not None:
            items = [next_level(i, out, s, new) for i, out, s in zip(items, outputs, sequences)]


def trees(run: Run) -> None:
    """Branching trees (the tree path), a chain beside them, then a level under a tree."""
    prefix = sequence(30, 9)
    shapes = [  # (committed prefix, tree nodes)
        (prefix, [(-1, prefix[-1]), (0, 7), (0, 8), (0, 9), (1, 10), (1, 11), (2, 12), (4, 13)]),
        (prefix[:6], [(-1, prefix[5]), (0, 4), (0, 5), (2, 6)]),
    ]
    items, all_paths = [], []
    for committed, nodes in shapes:
        item, paths = tree_item(run, committed, nodes)
        items.append(item)
        all_paths.append(paths)
    tokens = sequence(31, 20)
    items.append(chain(run, tokens[:14], 10))
    outputs = run.forward(items)
    for paths, out in zip(all_paths, outputs):
        for row, path in enumerate(paths):
            run.expect(out.take([row]), run.oracle.rows(path).data[-1:])
    run.expect(outputs[2], run.oracle.rows(tokens[:14]).data[10:])
    # Two children of the first tree's node 5 (a leaf), as the next draft level.
    level = dataclasses.replace(
        items[0],
        tokens=np.array([20, 21]),
        positions=np.full(2, len(all_paths[0][5])),
        parents=np.array([5, 5]),
        earlier=outputs[0],
        earlier_positions=items[0].positions,
        earlier_parents=items[0].parents,
        earlier_full=np.ones(len(shapes[0][1]), dtype=bool),
    )
    (children,) = run.forward([level])
    for row, token in enumerate((20, 21)):
        run.expect(children.take([row]), run.oracle.rows((*all_paths[0][5], token)).data[-1:])


def mixed_lengths(run: Run) -> None:
    """A long history beside short ones (length groups), chains and a tree together."""
    long, short = sequence(40, 640), sequence(41, 12)
    prefix = sequence(42, 7)
    tree, paths = tree_item(run, prefix, [(-1, prefix[-1]), (0, 1), (0, 2), (1, 3)])
    items = [chain(run, short[:8], 7), chain(run, long[:602], 600), tree, chain(run, short, 9)]
    outputs = run.forward(items)
    run.expect(outputs[0], run.oracle.rows(short[:8]).data[7:])
    run.expect(outputs[1], run.oracle.rows(long[:602]).data[600:])
    for row, path in enumerate(paths):
        run.expect(outputs[2].take([row]), run.oracle.rows(path).data[-1:])
    run.expect(outputs[3], run.oracle.rows(short).data[9:])


def long_prefills(run: Run) -> None:
    """Prefills longer than a chunk, alone, after stored rows, and beside a decode step."""
    tokens = sequence(50, 600)
    for stored in (0, 123):
        (out,) = run.forward([chain(run, tokens, stored)])
        run.expect(out, run.oracle.rows(tokens).data[stored:])
    short = sequence(51, 9)
    outputs = run.forward([chain(run, tokens[:300], 0), chain(run, short, 8)])
    run.expect(outputs[0], run.oracle.rows(tokens[:300]).data)
    run.expect(outputs[1], run.oracle.rows(short).data[8:])


def warm_replays(run: Run) -> None:
    """A warm restore (stored encoder rows, replayed consumers) beside a plain chain."""
    tokens, other = sequence(60, 14), sequence(61, 10)
    encoder, consumer = 9, 3
    full = run.oracle.rows(tokens)
    replay = replay_item(run.model, tokens, full, encoder, consumer)
    outputs = run.forward([replay, chain(run, other, 6)])
    layout = run.model.layout
    consumers = slice(layout.local.start, layout.logits.stop)
    rows = outputs[0].data
    count = encoder - consumer
    run.pairs.append((rows[:count, consumers], full.data[consumer:encoder, consumers]))
    run.pairs.append((rows[count:], full.data[encoder:]))
    run.expect(outputs[1], run.oracle.rows(other).data[6:])


def bounded_recovery(run: Run) -> None:
    """Bounded recovery (mask, compact): local attention and consumers limited per item."""
    keep = 4
    items, expected = [], []
    for index, mode in enumerate(("mask", "compact")):
        tokens = sequence(70 + index, 11)
        items.append(bounded_prefill(run.model, tokens, len(tokens) - keep, mode))
        expected.append(run.model.full_forward(tokens, mode=mode, keep=keep).data)
    for out, want in zip(run.forward(items), expected):
        run.expect(out, want)


def early_exit_draft(run: Run) -> None:
    """An early-exit draft reads the target's padded context (its first layer's columns),
    level after level, as the engine's draft does."""
    draft = make_draft(run.model, depth=1, seed=5)
    draft_oracle = Oracle(draft)
    sequences = [sequence(80 + i, 26) for i in range(3)]
    stored = [4, 12, 7]
    items = [chain(run, s[: c + 1], c, key=i) for i, (s, c) in enumerate(zip(sequences, stored))]
    shared = run.context(items, tail=6)
    layer = 2 * draft.width * draft.depth
    room = None if shared.local_room is None else shared.local_room[..., :layer]
    context = dataclasses.replace(shared, local=shared.local[..., :layer], local_room=room)
    for _ in range(3):
        outputs = draft.forward_rows(items, context, fast_paths=run.fast_paths)
        for item, out, tokens in zip(items, outputs, sequences):
            run.expect(out, draft_oracle.rows(tokens).data[item.positions])
        items = [next_level(i, out, s, 1) for i, out, s in zip(items, outputs, sequences)]


SCENARIOS: dict[str, tuple[Callable[[Run], None], str]] = {
    # name: (scenario, the fast path it must take: a name in forward.py watched while it runs)
    "decode steps": (decode_steps, "chain_rows"),
    "chain verification": (chain_verification, "chain_rows"),
    "draft levels": (draft_levels, "chain_rows"),
    "trees": (trees, "tree_rows"),
    "mixed lengths": (mixed_lengths, "group_suffixes"),
    "long prefills": (long_prefills, "chunked_rows"),
    "warm replays": (warm_replays, "tree_rows"),
    "bounded recovery": (bounded_recovery, "tree_rows"),
    "early-exit draft": (early_exit_draft, "chain_rows"),
}


@contextmanager
def fast_paths_refused() -> Iterator[None]:
    """The fast paths' entry points fail while the plain forward runs."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("fast_paths=False reached a fast path")

    with ExitStack() as stack:
        for name in ("compute_rows", "batch_context"):
            stack.enter_context(patch.object(tinymodel_module.fastpaths, name, refuse))
        stack.enter_context(patch.object(WorkBuffers, "scratch", refuse))
        yield


@contextmanager
def watching(name: str) -> Iterator[list[int]]:
    """Count the calls of `name`, a function `forward.py` calls."""
    calls: list[int] = []
    original = getattr(forward_module, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    with patch.object(forward_module, name, watched):
        yield calls


@pytest.mark.parametrize("window", [1, 2, 4, 8])
@pytest.mark.parametrize("name", SCENARIOS)
def test_fast_and_plain_forwards_give_the_same_rows(name: str, window: int) -> None:
    scenario, trick = SCENARIOS[name]
    runs = {}
    for fast in (True, False):
        model = TinyModel(seed=window, window=window, width=8, depth=2)
        run = Run(model, Oracle(TinyModel(seed=window, window=window, width=8, depth=2)), fast)
        if fast:
            with watching(trick) as calls:
                scenario(run)
            assert calls, f"the fast run of {name!r} never took {trick}"
        else:
            with fast_paths_refused():
                scenario(run)
        runs[fast] = run
    assert len(runs[True].pairs) == len(runs[False].pairs) > 0
    for (fast, want), (plain, _) in zip(runs[True].pairs, runs[False].pairs):
        assert max_difference(fast, plain) < SAME
        assert max_difference(fast, want) < TOLERANCE
        assert max_difference(plain, want) < TOLERANCE


# -- engines with the fast paths off: EngineConfig(fast_paths=False) --------------------------


PROMPTS = [([5, 3, 1, 4, 1, 5, 9, 2, 6], 9), ([2, 7], 11), ([0, 0, 1, 1, 2, 2, 3], 6), ([9], 8)]


@pytest.mark.parametrize("block_size", [1, 2, 16])
@pytest.mark.parametrize("branching", [1, 2])
@pytest.mark.parametrize("window", [1, 2, 4, 8])
@pytest.mark.parametrize("draft_kind", ["none", "early exit", "independent"])
def test_an_engine_with_its_fast_paths_off_commits_what_the_fast_one_does(
    window: int, draft_kind: str, branching: int, block_size: int
) -> None:
    results = {}
    for fast in (True, False):
        target = TinyModel(seed=window, window=window, width=8, depth=2)
        draft = {
            "none": None,
            "early exit": make_draft(target, seed=3),
            "independent": TinyModel(seed=4, window=2, width=8, depth=1),
        }[draft_kind]
        config = EngineConfig(
            max_active=3,
            draft_width=3,
            draft_branching=branching,
            block_size=block_size,
            num_blocks=128,
            fast_paths=fast,
        )
        engine = Engine(target, draft, config=config, clock=ManualClock())
        # The plain engine provably never takes a fast path: their entry points fail.
        with nullcontext() if fast else fast_paths_refused():
            ids = [engine.submit(prompt, max_tokens=count) for prompt, count in PROMPTS]
            engine.generate([5, 3, 1, 4], max_tokens=3)  # a cached prefix: a hot restore too
            drain(engine)
        check_all_finished(engine)
        results[fast] = [(engine.result(i).tokens, engine.committed_state(i)) for i in ids]
    for (fast_tokens, fast_state), (plain_tokens, plain_state) in zip(
        results[True], results[False]
    ):
        assert fast_tokens == plain_tokens
        assert fast_state.max_error(plain_state) < SAME


@pytest.mark.parametrize("value", [0, 1, "no", None])
def test_the_fast_paths_option_takes_only_true_or_false(value: object) -> None:
    with pytest.raises(ValueError, match="fast_paths"):
        EngineConfig(fast_paths=value)  # type: ignore[arg-type]
