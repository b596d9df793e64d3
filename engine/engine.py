"""The engine's public API, and one round: schedule -> draft -> verify -> commit -> finish.

Reading order: `request` (what a request is), `scheduler` (who runs, what is restored, how much
is verified), `speculation` (trees, drafters, acceptance), `runner` (the forwards), `commit`,
`blocks` (the pool's only door), `prefixes`, `history`, `views`. See docs/architecture.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .blocks import BlockManager
from .clock import Clock
from .commit import commit, commit_chunk, roll_back, rollback_count
from .config import EngineConfig, RequestError, Result, checked_models
from .history import Checkpoint, History
from .kv import BlockPool, pool_blocks
from .metrics import Observer
from .model import State, TinyModel, is_integer
from .prefixes import Prefixes
from .request import COUNTERS, Event, EventLog, Request, new_request, shown
from .rows import FinishedRows
from .runner import Runner, Verified
from .sampling import SamplingParams
from .scheduler import Scheduler
from .speculation.drafter import drafter_for
from .speculation.ngram import NgramDrafter
from .views import Views

_ENGINE_SERIALS = itertools.count()


class Engine:
    """A paged, prefix-caching, speculative inference engine over TinyModel."""

    def __init__(
        self,
        target: TinyModel | None = None,
        draft: TinyModel | NgramDrafter | None = None,
        *,
        config: EngineConfig | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        # A draft is a model (its forwards propose) or a drafter that runs none (n-gram).
        proposer = draft if isinstance(draft, NgramDrafter) else None
        draft = None if proposer is not None else draft
        self.target, self.config = checked_models(target, draft, config)
        self.draft = draft  # the draft model, if any
        self._clock = Clock(clock)  # with the seconds a synthetic clock added (metrics.py)
        # An early-exit draft computes exactly the target's rows for committed positions, so it
        # reads the target's KV; any other draft keeps its own rows in the same blocks.
        self.draft_reads_target = draft is not None and draft.is_early_exit_of(self.target)
        self.kv_models = {"target": self.target}
        if draft is not None and not self.draft_reads_target:
            self.kv_models["draft"] = draft
        cfg = self.config
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.log = EventLog()
        self.blocks = BlockManager(
            self.kv_models,
            num_blocks=pool_blocks(cfg, self.target, draft),
            block_size=cfg.block_size,
        )
        self.history = History(self.blocks)
        self.prefixes = Prefixes(self.models, cfg, self.blocks, self.log, self.counters)
        self.scheduler = Scheduler(
            cfg, self.kv_models, self.blocks, self.prefixes, self.history, self.log, self.counters
        )
        self.runner = Runner(self.models, self.blocks, cfg, next(_ENGINE_SERIALS))
        self.drafter = drafter_for(
            proposer or draft, self.runner, cfg, self.counters, reads_target=self.draft_reads_target
        )
        self.scheduler.drafts = draft is not None or proposer is not None
        self.views = Views(
            cfg, self.models, self.requests, self.scheduler.queue, self.scheduler.finished,
            self.blocks, self.prefixes, self.history, self.counters,
        )  # fmt: skip
        self.observer = self.views.observer = Observer(self.log)
        self.history.track(self.scheduler, self.prefixes, self.log, self.counters, self.views)

    # -- public API -------------------------------------------------------------------------

    @property
    def models(self) -> dict[str, TinyModel]:
        models = {"target": self.target}
        if self.draft is not None:
            models["draft"] = self.draft
        return models

    @property
    def requests(self) -> dict[str, Request]:
        return self.scheduler.requests

    @property
    def trace(self) -> list[Event]:
        return self.log.events

    @property
    def tick(self) -> int:
        return self.log.tick

    @property
    def pool(self) -> BlockPool:  # tests hook its methods to interrupt a round
        return self.blocks.pool

    def now(self) -> float:
        """The injected clock's reading, plus what the synthetic clock added (if it is on)."""
        return self._clock.read()

    def submit(
        self,
        prompt: object,
        *,
        max_tokens: int = 16,
        eos_id: int | None = None,
        request_id: str | None = None,
        priority: int = 0,
        sampling: SamplingParams | None = None,
    ) -> str:
        """Queue a request; validates everything before changing anything. `priority` orders
        admission under the priority policy (smaller first). A sampled request without a seed
        gets one drawn here (settings() and the `queued` event show it)."""
        request = new_request(
            self.target, self.config, self.blocks.num_blocks, self.requests,
            prompt, max_tokens, eos_id, request_id, priority, sampling,
        )  # fmt: skip
        queued_at = self.now()  # read once, before anything changes: it may raise
        self.requests[request.request_id] = request
        self.scheduler.queue.append(request.request_id)
        self.log.emit(
            "queued",
            request.request_id,
            prompt_positions=len(request.prompt),
            max_tokens=request.max_tokens,
            **({"priority": request.priority} if request.priority else {}),
            **request.sampling.settings(),
            clock=queued_at,
        )
        return request.request_id

    def settings(self, request_id: str) -> dict[str, object]:
        """A request's settings as the engine keeps them: prompt, max_tokens, eos_id, priority,
        and for a sampled request its sampling (seed included: submit them back for the same
        tokens)."""
        return self._get(request_id).settings()

    def request_ids(self) -> list[str]:
        """Every request's id, in submission order (finished ones too)."""
        return list(self.requests)

    def cancel(self, request_id: str) -> bool:
        """Finish a queued or running request as cancelled; False if it had already finished."""
        request = self._get(request_id)
        if request.finished:
            return False
        self._finish(request, "cancelled")
        return True

    def result(self, request_id: str) -> Result:
        request = self._get(request_id)
        if not request.finished:
            raise ValueError(f"request {request_id!r} has not finished (it is {request.status})")
        return self._result(request)

    def _result(self, request: Request) -> Result:
        timing = self.observer.timing(request.request_id)
        return replace(request.result(), timing={**timing, "itl": list(timing["itl"])})

    def run(self, *, max_steps: int | None = None, raise_on_error: bool = True) -> list[Result]:
        """Step until idle; return the results not returned before (each delivered once), in
        the order their requests were submitted."""
        if max_steps is not None and (not is_integer(max_steps) or max_steps < 0):
            raise ValueError(f"max_steps must be None or a non-negative integer, got {max_steps!r}")
        steps = 0
        while self.scheduler.queue and (max_steps is None or steps < max_steps):
            self.step()
            steps += 1
        results = [self._result(request) for request in self.scheduler.deliver()]
        if raise_on_error and any(r.finish_reason == "error" for r in results):
            raise RequestError(results)
        return results

    def generate(
        self,
        prompt: object,
        *,
        max_tokens: int = 16,
        eos_id: int | None = None,
        sampling: SamplingParams | None = None,
    ) -> Result:
        """Submit one prompt and step until it finishes. Its result is delivered here (run()
        will not return it again); other requests' results wait for run(). Raises
        RequestError if this request failed."""
        request_id = self.submit(prompt, max_tokens=max_tokens, eos_id=eos_id, sampling=sampling)
        while not self.requests[request_id].finished:
            if not self.scheduler.queue:  # cannot happen: only a finished request leaves it
                raise RuntimeError(f"{request_id} stopped before it finished")
            self.step()
        self.scheduler.delivered.add(request_id)
        result = self.result(request_id)
        if result.finish_reason == "error":
            raise RequestError([result])
        return result

    @property
    def idle(self) -> bool:
        return not self.scheduler.queue

    @property
    def undo_available(self) -> int:
        return len(self.history)

    def metrics(self) -> dict[str, dict[str, Any]]:
        return self.views.metrics()

    def snapshot(self) -> dict[str, object]:
        """A JSON-serialisable view of the whole engine, for viewers and exports."""
        return self.views.snapshot(self.tick, self.now())

    def pending_positions(self) -> int:
        """Rows the next round computes before its first token, at most: those not stored
        yet of the requests it would admit, for each model that stores rows (a cached prefix
        may cover part of a new prompt). A viewer can tell a long prefill from a decode step
        before running it."""
        return self.scheduler.pending_positions()

    def committed_state(self, request_id: str) -> State:
        """The request's committed arrays, comparable with the oracle's `.state`."""
        request = self._get(request_id)
        if request.identities not in (None, self.prefixes.identities()):
            raise ValueError(
                f"request {request_id!r} computed its rows with weights since replaced: its "
                "committed state would need a forward of the old model"
            )
        return self.runner.committed_state(request)

    def rollback(self, request_id: str, tokens: int = 1) -> list[int]:
        """Remove the request's last `tokens` generated tokens (clamped); returns them.

        Its rows, blocks and the draft's cursor return to the shorter prefix; a finished
        request is reopened and queued again. Cancelled or failed requests cannot roll back.
        """
        request = self._get(request_id)
        count = rollback_count(request, tokens)
        removed = request.tokens[len(request.tokens) - count :] if count else []
        freed: list[int] = []
        if count:
            if request.finished:  # reopened as a copy: the history shares the finished one
                request = self.scheduler.reopen(request)
                self.views.forget(request_id)  # the view would keep the old object
            freed = roll_back(request, count, self.blocks, self.counters)
        self.log.emit("rollback", request_id, removed=removed, freed_blocks=freed)
        return removed

    def undo(self) -> list[Event]:
        """Rewind the engine to just before the last step(); returns that round's events."""
        if not self.history:
            raise ValueError(
                "nothing to undo: no step is recorded"
                + (" (undo_depth is 0)" if self.config.undo_depth == 0 else "")
            )
        checkpoint = self.history.pop()
        undone = self.trace[checkpoint.trace_length :]
        self.history.rewind(checkpoint)
        self._clock.offset = self.observer.synthetic_offset()
        return undone

    # -- one round --------------------------------------------------------------------------

    def step(self) -> list[Event]:
        """Run one round; returns its events. Interrupts leave the engine as it was."""
        # Everything that can raise (an interrupt lands anywhere) is inside the try, taking
        # and recording the checkpoint included: the handler must see any partial work.
        history = list(self.history.entries)
        self.history.trimmed_for_space = 0
        writes = self.blocks.writes
        checkpoint: Checkpoint | None = None
        start = len(self.trace)
        try:
            checkpoint = self.history.save()
            self.history.push(checkpoint)
            self._round()
            self.history.trim(self.config.undo_depth)
            events = self.trace[start:]
        except BaseException as failure:
            # Put back the engine step() found, but for one `step_aborted` event. An interrupt
            # can land after a forward wrote non-finite rows into a model's work buffers and
            # before the round checked them: forget the buffers with the round.
            self.runner.reset_work_buffers()
            self.history.rewind(checkpoint, history, wrote=self.blocks.writes != writes)
            self._clock.offset = self.observer.synthetic_offset()
            self.log.emit("step_aborted", None, error_type=type(failure).__name__)
            raise
        return events

    def _round(self) -> None:
        self.log.tick += 1
        now = self.now()
        if (stale := self.scheduler.stale()) is not None:  # a model's weights were replaced
            for request, why in stale:
                self._fail(request, why)
            self.prefixes.drop_other_models()  # their keys could never match again
        self.prefixes.expire(now)
        plan = self.scheduler.admit(now)  # schedule, inside the token budget
        if not plan.batch:
            return
        drafted = self.drafter.propose(plan.batch, self._fail)  # draft
        for proposal in drafted.grown:
            request, proposed = proposal.request, len(proposal.tree) - 1
            request.proposed += proposed
            self.counters["proposed"] += proposed
            self.log.emit("draft", request.request_id, **proposal.tree.to_dict())
        if not drafted.proposals:
            return
        plans = self.scheduler.budget(drafted.proposals, plan)  # verification and blocks
        if not plans:
            return
        schedule = len(self.trace)
        self.scheduler.emit_schedule(plans, now)
        context = drafted.context_for([each.proposal for each in plans])
        verified = self.runner.verify(plans, context, self._fail)  # verify
        self.counters["target_forwards"] += 1
        for each in verified:
            self._commit(each, now)  # commit and finish
        if self.config.synthetic_clock:  # the round took its batch's cost on the synthetic clock
            self._clock.offset += self.trace[schedule]["synthetic_seconds"]

    def _commit(self, verified: Verified, now: float) -> None:
        """Commit one request's tokens (or its prefill chunk), publish a new prefix, finish
        or queue the request."""
        request = verified.request
        if request.identities is None:  # its first computed rows
            request.identities = self.prefixes.identities()
        if verified.plan.stop is not None:
            commit_chunk(verified, self.blocks, self.counters, self.log, self.prefixes.key)
            self.scheduler.queue.append(request.request_id)
            return
        new_tokens, exhausted = commit(
            verified, self.blocks, self.drafter, self.counters, self.log, self.prefixes.key
        )
        if request.fresh:
            request.fresh = False
            self.prefixes.publish(request, now)
        stopped = request.eos_id is not None and request.generated > 0
        if stopped and new_tokens[-1:] == [request.eos_id]:
            self._finish(request, "stop", now=now)
        elif exhausted:
            self._finish(request, "length", now=now)
        else:
            self.scheduler.queue.append(request.request_id)

    def _fail(self, request: Request, error: str) -> None:
        self._finish(request, "error", error)

    def _finish(
        self, request: Request, reason: str, error: str | None = None, *, now: float | None = None
    ) -> None:
        if reason in ("stop", "length") and request.table:
            self.prefixes.publish(request, self.now() if now is None else now)
        if request.table:
            # A copy of what the committed state reads: the blocks go back now.
            request.final = self.blocks.keep_final(request, self.target.window)
            self.blocks.release_all(request)
        elif request.final is None:
            request.final = FinishedRows.empty(self.target.layout)
        self.scheduler.retire(request, reason, error)
        self.log.emit(
            "finished",
            request.request_id,
            finish_reason=reason,
            error=error,
            generated=request.generated,
        )

    # -- helpers ----------------------------------------------------------------------------

    def _get(self, request_id: str) -> Request:
        if not isinstance(request_id, str) or request_id not in self.requests:
            raise KeyError(f"unknown request id {shown(request_id)}")
        return self.requests[request_id]
