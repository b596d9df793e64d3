"""The model runner: builds a round's row inputs from stored rows, runs the forwards, stores
the rows they computed. It decides nothing: which rows to compute comes from the scheduler and
the drafter; what to keep, from the commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .blocks import BlockManager
from .config import EngineConfig
from .model import State, TinyModel
from .request import Request
from .reservation import Scheduled
from .rows import BatchContext, RowBatchItem, Rows, Stored
from .sampling import TARGET_STREAM, distributions, noise_rows, race
from .speculation.acceptance import sampled_choices
from .speculation.tree import ROOT, DraftTree

Outputs = tuple[list[Rows | Exception], np.ndarray | None]


@dataclass(eq=False)
class Verified:
    """One request's verified rows, and the target's choice at the root and every verified
    node (the argmax, or for a sampled request its seeded sample or rejection-sampler pick)."""

    plan: Scheduled
    request: Request
    tree: DraftTree
    selected: list[int]
    item: RowBatchItem
    out: Rows
    rows: dict[int, int]  # tree node -> row of `out`
    slots: np.ndarray  # pool slots of `out`
    choice: dict[int, int]
    depth: int  # the target's layers: each consumer row is computed once per layer
    checks: dict[int, dict] = field(default_factory=dict)  # a sampled node's p, q, draw...


class Runner:
    def __init__(
        self,
        models: dict[str, TinyModel],
        blocks: BlockManager,
        config: EngineConfig,
        serial: int,
    ) -> None:
        self.models = models
        self.target = models["target"]
        self.blocks = blocks
        self.config = config
        self.serial = serial  # tells this engine's stored rows from another's in model caches

    # -- inputs -----------------------------------------------------------------------------

    def catch_up_item(self, request: Request, role: str, stop: int | None = None) -> RowBatchItem:
        """Rows from the role's cursor to the pending token (replay rows first), or to `stop`
        for a prefill chunk: then the item is that of the prompt cut at `stop`."""
        encoder, consumer = request.cursor(role)
        n = len(request.tokens) if stop is None else stop
        encoder = min(encoder, n)
        window = self.blocks.kv_models[role].window
        local_start = min(max(0, consumer - window + 1, request.consumer_from), consumer)
        return RowBatchItem(
            context=self.blocks.stored(request, role, 0, encoder),
            local=self.blocks.stored(request, role, local_start, consumer),
            local_positions=np.arange(local_start, consumer),
            tokens=np.array(request.tokens[consumer:n]),
            positions=np.arange(consumer, n),
            parents=np.arange(-1, n - consumer - 1),
            replay=encoder - consumer,
            local_lower=request.local_lower,
            consumer_from=request.consumer_from,
            context_key=(
                self.serial,
                request.request_id,
                role,
                request.admitted,
                self.blocks.rewrites,
            ),
        )

    def draft_item(self, request: Request, role: str) -> RowBatchItem:
        """The draft's first rows; with `draft_context` set, it sees only that many of the most
        recent stored positions (a proposal may be approximate; verification is exact)."""
        item = self.catch_up_item(request, role)
        limit, context = self.config.draft_context, item.context
        if limit is None or item.replay or len(context) <= limit or not isinstance(context, Stored):
            return item
        index = context.index
        skip = len(context) - limit
        index = slice(index.start + skip, index.stop) if isinstance(index, slice) else index[skip:]
        return replace(item, context=Stored(context.store, index), context_key=None)

    def verify_item(
        self, request: Request, base: RowBatchItem, tree: DraftTree, selected: list[int]
    ) -> tuple[RowBatchItem, dict[int, int]]:
        """The target's rows: catch-up rows (`base`), then the selected nodes; and the row of
        the root and of every selected node."""
        rows = {ROOT: len(base.tokens) - 1}
        if not selected:
            return base, rows
        count = len(base.tokens)
        tokens, positions, parents = base.tokens.tolist(), base.positions.tolist(), []
        last = len(request.tokens) - 1
        for offset, node in enumerate(selected):
            rows[node] = count + offset
            parents.append(rows[tree.parents[node]])
            tokens.append(tree.tokens[node])
            positions.append(last + tree.depths[node])
        item = RowBatchItem(
            context=base.context,
            local=base.local,
            local_positions=base.local_positions,
            tokens=np.array(tokens, dtype=np.int64),
            positions=np.array(positions, dtype=np.int64),
            parents=np.array(base.parents.tolist() + parents, dtype=np.int64),
            replay=base.replay,
            local_lower=base.local_lower,
            consumer_from=base.consumer_from,
            context_key=base.context_key,
        )
        return item, rows

    # -- forwards ---------------------------------------------------------------------------

    def forward(
        self, model: TinyModel, items: list[RowBatchItem], context: BatchContext | None = None
    ) -> Outputs:
        """One batched forward; if it fails, find the failing requests one by one, so a
        failure finishes only its own request. Also returns every output's rows as one array
        when all items succeeded (None otherwise)."""
        flat = None
        # Overflow and invalid values are found below and fail only their requests: NumPy must
        # not warn about them on stderr (the engine never prints) nor raise under np.seterr.
        with np.errstate(all="ignore"):
            try:
                result = model.forward_rows(items, context, fast_paths=self.config.fast_paths)
                outputs: list[Rows | Exception] = list(result)
                flat = getattr(result, "flat", None)
            except Exception:
                self.reset_work_buffers()
                outputs = []
                for item in items:
                    try:
                        one = model.forward_rows([item], fast_paths=self.config.fast_paths)
                        outputs.extend(one)
                    except Exception as error:
                        outputs.append(error)
        if flat is None:
            computed = [out.data for out in outputs if isinstance(out, Rows)]
            if len(computed) == len(outputs) and computed:
                flat = np.concatenate(computed)
        if flat is not None and np.isfinite(flat).all():
            return outputs, flat
        for index, out in enumerate(outputs):  # rare: find the non-finite outputs
            if isinstance(out, Rows) and not np.isfinite(out.data).all():
                outputs[index] = FloatingPointError("the model produced non-finite values")
                self.reset_work_buffers()
        return outputs, None

    def reset_work_buffers(self) -> None:
        """After a failed or non-finite forward, forget every model's work buffers: a draft
        that reads the target's KV pads its rows in the target's buffers, and masked padding is
        added to, so a NaN left anywhere would reach healthy requests in later rounds."""
        for model in self.models.values():
            model.reset_scratch()

    def verify(
        self,
        plans: list[Scheduled],
        context: BatchContext | None,
        fail: Callable[[Request, str], None],
    ) -> list[Verified]:
        """One tree-masked target forward over every request's catch-up rows and selected
        nodes; stores the rows. A request whose rows fail is finished by `fail`, left out."""
        built = []
        for plan in plans:
            request, proposal = plan.request, plan.proposal
            if plan.stop is not None:  # a prefill chunk: rows only, nothing to verify
                built.append((self.catch_up_item(request, "target", plan.stop), {}))
                continue
            base = proposal.base or self.catch_up_item(request, "target")
            built.append(self.verify_item(request, base, proposal.tree, plan.selected))
        outputs, flat = self.forward(self.target, [item for item, _ in built], context)
        verified = []
        for plan, (item, rows), out in zip(plans, built, outputs):
            request = plan.request
            if isinstance(out, Exception):
                fail(request, f"{type(out).__name__}: {out}")
                continue
            consumer = request.cursor("target")[1]
            slots = self.blocks.slot_array(request, consumer, consumer + len(out))
            tree, selected, depth = plan.proposal.tree, plan.selected, self.target.depth
            verified.append(
                Verified(plan, request, tree, selected, item, out, rows, slots, {}, depth)
            )
        if verified:
            self._store_and_choose(verified, flat)
        return verified

    def _store_and_choose(self, verified: list[Verified], flat: np.ndarray | None) -> None:
        """Write every computed target row into the pool (committed positions first, then the
        tree's nodes as speculative rows), and make the target's choice at every verified node
        (and the root) of every request: the argmax for all greedy requests in one call.

        One write for the whole batch: each request's slots are its own blocks (copy-on-write
        happened when the round reserved space), so no commit touches another's rows.
        """
        if not [v for v in verified if v.item.replay]:
            rows = flat if flat is not None else np.concatenate([v.out.data for v in verified])
            slots = np.concatenate([v.slots for v in verified])
            self.blocks.write("target", slots, Rows(rows, self.target.layout))
        else:
            for v in verified:  # replayed positions keep their stored encoder state
                self.blocks.write("target", v.slots, v.out, replay=v.item.replay)
            rows = np.concatenate([v.out.data for v in verified]) if flat is None else flat
        offset = 0
        index: list[int] = []
        for v in verified:
            index.extend(offset + row for row in v.rows.values())
            offset += len(v.out)
        logits = rows[np.array(index, dtype=np.intp), self.target.layout.logits]
        best = iter(logits.argmax(axis=-1).tolist())
        starts, start = [], 0
        for v in verified:
            v.choice = {node: next(best) for node in v.rows}
            starts.append(start)
            start += len(v.rows)
        sampled = [
            (v, at) for v, at in zip(verified, starts) if v.rows and not v.request.sampling.greedy
        ]
        if sampled:
            self._sample(sampled, logits)

    def _sample(self, sampled: list[tuple[Verified, int]], logits: np.ndarray) -> None:
        """Sampled requests' choices (their rows start at the given offsets of `logits`): the
        request's stream at each node's position decides, for every row in one pass."""
        rows, params, seeds, positions = [], [], [], []
        for v, start in sampled:
            request, depths = v.request, v.tree.depths
            rows.extend(range(start, start + len(v.rows)))
            params.extend([request.sampling] * len(v.rows))
            seeds.extend([request.sampling.seed] * len(v.rows))
            root = len(request.tokens) - 1
            positions.extend(root + depths[node] + 1 for node in v.rows)  # of the chosen token
        probs = distributions(logits[rows], params)
        uniforms = noise_rows(seeds, positions, TARGET_STREAM, probs.shape[1])
        samples = race(probs, uniforms).tolist()
        rejection = self.config.draft_acceptance == "rejection"
        offset = 0
        for v, _ in sampled:
            count = len(v.rows)
            v.choice, v.checks = sampled_choices(
                v.tree,
                v.selected,
                list(v.rows),
                probs[offset : offset + count],
                uniforms[offset : offset + count],
                samples[offset : offset + count],
                v.plan.proposal.draft_probs if rejection else None,
            )
            offset += count

    # -- committed state --------------------------------------------------------------------

    def committed_state(self, request: Request) -> State:
        """The request's committed arrays, computed from its stored rows."""
        tokens = tuple(request.tokens)
        n = len(tokens)
        if request.final is not None:
            stored = request.final.rows()
            cursor = len(stored)
        else:
            cursor = request.committed()
            stored = self.blocks.rows(request, "target", 0, cursor)
        if cursor == n:  # a zero-token request computed every row of its prompt
            return self.target.state_of(tokens, stored)
        local_start = max(0, cursor - self.target.window + 1, request.consumer_from)
        item = RowBatchItem(
            context=stored,
            local=stored.take(slice(local_start, cursor)),
            local_positions=np.arange(local_start, cursor),
            tokens=np.array(tokens[cursor:]),
            positions=np.arange(cursor, n),
            parents=np.arange(n - cursor) - 1,
            local_lower=request.local_lower,
            consumer_from=request.consumer_from,
        )
        (new,) = self.target.compute_rows([item], fast_paths=self.config.fast_paths)
        return self.target.state_of(tokens, Rows.concat([stored, new]))
