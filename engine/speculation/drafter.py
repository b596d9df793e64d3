"""Drafters: who proposes the tokens the target verifies.

A `Drafter` turns the round's batch into a `DraftRound`, one tree per request; the engine never
looks inside. `NoDrafter` proposes nothing (plain decoding). `ModelDrafter` runs a small model:
an early exit of the target (it reads the target's stored rows) or a model of its own (its
rows are stored beside the target's in the same blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import numpy as np

from ..config import EngineConfig
from ..model import TinyModel, length_groups
from ..request import Request
from ..rows import BatchContext, RowBatchItem, Rows
from ..runner import Runner
from .ngram import NgramDrafter, NgramRound
from .proposal import DraftRound, Proposal, drafts, rooted, round_caps
from .tree import ROOT, Children, best_nodes, expand, sampled_children, top_children

Fail = Callable[[Request, str], None]  # finishes a request with an error message


class Drafter(Protocol):
    def propose(self, batch: list[Request], fail: Fail) -> DraftRound:
        """A tree per request of the batch (a failing request is finished by `fail`)."""
        ...

    def keep(self, proposal: Proposal, path: list[int], cursor: int) -> None:
        """After the commit: keep whatever the drafter stored for committed positions."""
        ...


class NoDrafter:
    def propose(self, batch: list[Request], fail: Fail) -> DraftRound:
        return DraftRound(rooted(batch))

    def keep(self, proposal: Proposal, path: list[int], cursor: int) -> None:
        pass


def drafter_for(
    draft: TinyModel | NgramDrafter | None,
    runner: Runner,
    config: EngineConfig,
    counters: dict[str, int],
    *,
    reads_target: bool,
) -> Drafter:
    """The drafter an engine with this draft uses (a new kind of drafter is chosen here)."""
    if draft is None:
        return NoDrafter()
    if isinstance(draft, NgramDrafter):
        return NgramRound(draft, config)
    return ModelDrafter(draft, runner, config, counters, reads_target=reads_target)


class ModelDrafter:
    """Grows each request's tree one level per batched draft forward.

    Level 0 catches the draft up to the root (prefill, replay or just the pending token);
    every later level computes the rows of the nodes chosen for expansion. The stored context
    is padded once and shared by all levels.
    """

    def __init__(
        self,
        draft: TinyModel,
        runner: Runner,
        config: EngineConfig,
        counters: dict[str, int],
        *,
        reads_target: bool,
    ) -> None:
        self.draft = draft
        self.runner = runner
        self.config = config
        self.counters = counters
        self.reads_target = reads_target
        self.role = "target" if reads_target else "draft"

    def propose(self, batch: list[Request], fail: Fail) -> DraftRound:
        proposals = rooted(batch)
        caps = round_caps(self.config, len(proposals))
        if caps is None:
            return DraftRound(proposals)  # no position is left to verify a draft with
        depth_cap, node_cap = caps
        active = [p for p in proposals if drafts(p.request, depth_cap)]
        if not active:
            return DraftRound(proposals)
        items = [self.runner.draft_item(p.request, self.role) for p in active]
        drafted = DraftRound(proposals)
        context = self._context(active, items, node_cap, drafted)
        self._first_level(active, items, context, node_cap, fail)
        for depth in range(1, depth_cap):
            if not self._next_level(active, depth, depth_cap, node_cap, context, fail):
                break
        drafted.proposals = [p for p in proposals if not p.request.finished]
        drafted.grown = [p for p in active if not p.request.finished]
        return drafted

    def _context(
        self, active: list[Proposal], items: list[RowBatchItem], node_cap: int, drafted: DraftRound
    ) -> BatchContext | None:
        """The stored rows padded once for every level (None: each forward pads its own)."""
        # Room for every row this round can add, so later levels never regrow the context.
        tail = max(len(item.tokens) for item in items) + node_cap + 1
        if not self.config.fast_paths:
            return None  # the plain path: every forward pads its own
        if len(length_groups(items)) > 1:
            return None  # very different lengths: each forward pads its groups apart
        if not (self.reads_target and self.config.draft_context is None):
            return self.draft.batch_context(items, tail=tail)
        # The draft reads exactly the target's stored rows: pad them once for both models
        # (the draft sees the first layer's local columns of the same array).
        shared = self.runner.target.batch_context(items, tail=tail)
        drafted.context, drafted.padded_for = shared, list(active)
        for proposal, item in zip(active, items):
            proposal.base = item
        layer = 2 * self.draft.width * self.draft.depth
        local_room = None if shared.local_room is None else shared.local_room[..., :layer]
        return replace(shared, local=shared.local[..., :layer], local_room=local_room)

    def _first_level(
        self,
        active: list[Proposal],
        items: list[RowBatchItem],
        context: BatchContext | None,
        node_cap: int,
        fail: Fail,
    ) -> None:
        outputs, logits = self._outputs(active, items, context, fail)
        expanding = []
        for proposal, item, out in zip(active, items, outputs):
            proposal.item, proposal.parts = item, [out]
            proposal.replay = item.replay
            proposal.rows[ROOT] = len(out) - 1
            self.counters["draft_rows"] += len(out)
            expanding.append([ROOT] if len(out) else [])
        if logits is None:
            last_rows = np.concatenate([out.logits[-1:] for out in outputs])
        else:  # every proposal's last row, out of the forward's one array
            last_rows = logits[np.cumsum([len(out) for out in outputs]) - 1]
        self._expand_level(active, expanding, last_rows, node_cap)

    def _next_level(
        self,
        active: list[Proposal],
        depth: int,
        depth_cap: int,
        node_cap: int,
        context: BatchContext | None,
        fail: Fail,
    ) -> bool:
        """Compute the rows of the best frontier nodes and add their children; False when no
        tree grows any more."""
        expanding = []
        for proposal in active:
            request = proposal.request
            room = len(proposal.tree) - 1 < node_cap
            deep_enough = depth < min(depth_cap, request.remaining - 1)
            chosen = best_nodes(proposal.tree, proposal.frontier, self.config.draft_branching)
            grows = room and deep_enough and not request.finished  # a failed draft stops
            expanding.append(chosen if grows else [])
        if not any(expanding):
            return False
        items = [self._level_item(p, nodes, depth) for p, nodes in zip(active, expanding)]
        outputs, logits = self._outputs(active, items, context, fail)
        for index, (proposal, item, out) in enumerate(zip(active, items, outputs)):
            if proposal.request.finished:  # its draft failed: no rows, no children
                expanding[index] = []
            nodes = expanding[index]
            if not nodes:
                continue
            base = sum(len(part) for part in proposal.parts)
            for offset, node in enumerate(nodes):
                proposal.rows[node] = base + offset
            proposal.item = item
            proposal.parts.append(out)
            self.counters["draft_rows"] += len(nodes)
        if logits is None:
            logits = np.concatenate([out.logits for out in outputs])
        self._expand_level(active, expanding, logits, node_cap)
        return True

    def _outputs(
        self,
        active: list[Proposal],
        items: list[RowBatchItem],
        context: BatchContext | None,
        fail: Fail,
    ) -> tuple[list[Rows], np.ndarray | None]:
        """A draft forward; a request whose draft fails finishes with an error (its rows are
        replaced by empty ones so the batch keeps its shape for the next level). Also returns
        the logits of every row, proposal after proposal, when all succeeded (None otherwise)."""
        outputs, flat = self.runner.forward(self.draft, items, context)
        self.counters["draft_forwards"] += 1
        rows = []
        for proposal, out in zip(active, outputs):
            if isinstance(out, Exception):
                if not proposal.request.finished:
                    fail(proposal.request, f"draft {type(out).__name__}: {out}")
                out = Rows.empty(self.draft.layout, 0)
            rows.append(out)
        return rows, None if flat is None else flat[:, self.draft.layout.logits]

    def _expand_level(
        self, active: list[Proposal], expanding: list[list[int]], logits: np.ndarray, cap: int
    ) -> None:
        """Add children to every expanded node of every tree (one softmax/top-k for all greedy
        requests, one sampling pass for the others); `logits` holds one row per expanded node,
        proposal after proposal."""
        branching = self.config.draft_branching
        probabilities, top = top_children(logits, branching)
        sampled = self._sampled_children(active, expanding, logits)
        row = 0
        for proposal, nodes in zip(active, expanding):
            count = len(nodes)  # each expanded node contributed one row of logits
            probs, tops = probabilities[row : row + count], top[row : row + count]
            drawn = {}
            if count and not proposal.request.sampling.greedy:
                children = [sampled[row + i] for i in range(count)]
                probs, tops = [c.probs for c in children], [c.tokens for c in children]
                drawn = {(n, c.tokens[0]): c.q for n, c in zip(nodes, children) if c.q is not None}
            proposal.frontier = expand(proposal.tree, nodes, probs, tops, cap)
            for child in proposal.frontier if drawn else ():
                key = (proposal.tree.parents[child], proposal.tree.tokens[child])
                proposal.draft_probs[child] = drawn[key]
            row += count

    def _sampled_children(
        self, active: list[Proposal], expanding: list[list[int]], logits: np.ndarray
    ) -> dict[int, Children]:
        """The children of every expanded node of a sampled request, by row of `logits`."""
        rows, params, positions = [], [], []
        row = 0
        for proposal, nodes in zip(active, expanding):
            request = proposal.request
            if not request.sampling.greedy:
                for offset, node in enumerate(nodes):
                    rows.append(row + offset)
                    params.append(request.sampling)
                    positions.append(len(request.tokens) + proposal.tree.depths[node])
            row += len(nodes)
        if not rows:
            return {}
        rejection = self.config.draft_acceptance == "rejection"
        children = sampled_children(
            logits[rows], params, positions, self.config.draft_branching, rejection
        )
        return dict(zip(rows, children))

    def _level_item(self, proposal: Proposal, nodes: list[int], depth: int) -> RowBatchItem:
        """The draft rows of `nodes` (all at `depth`), attending to this round's earlier rows."""
        item, tree = proposal.item, proposal.tree
        assert item is not None and proposal.out is not None
        if proposal.request.finished:  # its draft failed: a placeholder with no rows
            empty = np.zeros(0, dtype=np.int64)
            return replace(item, tokens=empty, positions=empty, parents=empty, replay=0)
        position = len(proposal.request.tokens) - 1 + depth
        # Few NumPy calls (this runs per request per level): the new rows' three fields are
        # rows of one array, the earlier rows' positions and parents halves of another.
        new = np.array(
            [
                [tree.tokens[n] for n in nodes],
                [position] * len(nodes),
                [proposal.rows[tree.parents[n]] for n in nodes],
            ],
            dtype=np.int64,
        )
        if len(item.earlier_positions):
            earlier = np.concatenate(
                [item.earlier_positions, item.positions, item.earlier_parents, item.parents]
            )
            count = len(earlier) // 2
            earlier_positions, earlier_parents = earlier[:count], earlier[count:]
        else:  # after the first level, its rows are the earlier rows as they stand
            earlier_positions, earlier_parents = item.positions, item.parents
            count = len(earlier_positions)
        # Only the first level's rows can be replays, and they lead it.
        replay = proposal.replay
        full = np.arange(count) >= replay if replay else np.ones(count, dtype=bool)
        return RowBatchItem(
            context=item.context,
            local=item.local,
            local_positions=item.local_positions,
            tokens=new[0],
            positions=new[1],
            parents=new[2],
            replay=0,
            local_lower=item.local_lower,
            consumer_from=item.consumer_from,
            earlier=proposal.out,
            earlier_positions=earlier_positions,
            earlier_parents=earlier_parents,
            earlier_full=full,
            # The first level's stored rows: a level padded apart (length groups, no shared
            # context) keeps them instead of copying the whole history again.
            context_key=item.context_key,
        )

    def keep(self, proposal: Proposal, path: list[int], cursor: int) -> None:
        """Keep the draft rows of committed positions (a draft with rows of its own); the
        draft resumes from there."""
        if self.reads_target or proposal.out is None or proposal.item is None:
            return
        request = proposal.request
        encoder, consumer = request.cursor("draft")
        base_rows = proposal.rows[ROOT] + 1  # catch-up rows, root included
        chain = list(range(base_rows))
        for node in path:
            if node not in proposal.rows:
                break
            chain.append(proposal.rows[node])
        chain = chain[: max(0, cursor - consumer)]
        if not chain:
            return
        blocks = self.runner.blocks
        slots = blocks.slot_array(request, consumer, consumer + len(chain))
        rows = proposal.out.take(np.array(chain))
        blocks.write("draft", slots, rows, replay=min(proposal.replay, len(chain)))
        end = consumer + len(chain)
        request.cursors["draft"] = [max(encoder, end), end]
        blocks.seal(request, consumer, end, role="draft")
