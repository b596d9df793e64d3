"""A debugging session: one engine, its scenario, an injected clock and the operations log.

The app and the command line both act through a Session, never on engine internals. Every
user operation is appended to `operations`, so a session can be saved as a trace and
re-executed exactly (scenario + operations determine everything).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine import Engine, SamplingParams

from .describe import ttl_cache_entries
from .log_view import LogView, log_still_holds
from .scenario import Scenario
from .scenario_events import ScenarioEvent, sampling_of

Event = dict[str, Any]


HAND_ADDED_PREFIX = "user-"  # the ids of requests added by hand: user-1, user-2, ...


class ManualClock:
    """The engine's injected clock: time moves only when the session says so."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class _Mark:
    next_event: int
    clock: float
    notes: int


class Session:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.clock = ManualClock()
        self.engine: Engine = scenario.build_engine(self.clock)
        self.next_event = 0
        self.operations: list[dict[str, Any]] = []
        self.notes: list[Event] = []  # scenario notes and clock moves, shown in the log
        self._submitted: dict[int, str] = {}  # request id by the index of its submit operation
        self._removed: dict[int, int] = {}  # tokens removed by the index of a rollback operation
        self._marks: deque[_Mark] = deque()
        # The merged log kept between calls of log_view(): (events, trace seen, notes seen).
        self._merged: tuple[list[Event], int, int] = ([], 0, 0)
        # The last trace event and note that merge saw: if undo replaced them, start afresh.
        self._last_trace_event: Event | None = None
        self._last_note: Event | None = None
        self._apply_due()
        # Engine metrics at the end of every round (the Perfetto counters): recorded as the
        # session goes, so an export need not re-execute it; an undo drops the undone rounds.
        self._round_metrics: dict[int, dict[str, Any]] = {0: self.engine.metrics()}

    def round_metrics(self) -> dict[int, dict[str, Any]]:
        """The engine's metrics after the last operation of every round so far, by tick."""
        return dict(self._round_metrics)

    def _record(self, operation: dict[str, Any]) -> None:
        """Record an operation that took effect, and the metrics it left."""
        self.operations.append(operation)
        tick = self.engine.tick
        if operation["op"] == "undo":
            for undone in [t for t in self._round_metrics if t > tick]:
                del self._round_metrics[undone]
        self._round_metrics[tick] = self.engine.metrics()

    # -- what can happen now ------------------------------------------------------------------

    @property
    def pending_events(self) -> tuple[ScenarioEvent, ...]:
        return self.scenario.events[self.next_event :]

    def can_step(self) -> bool:
        return not self.engine.idle

    @property
    def finished(self) -> bool:
        return self.engine.idle and not self.pending_events

    # -- operations (each is recorded) --------------------------------------------------------

    def step(self) -> list[Event]:
        """One engine round, then the scenario events that have become due."""
        if not self.can_step():
            raise ValueError("nothing to step: every request has finished")
        mark = _Mark(self.next_event, self.clock.now, len(self.notes))
        # A failed round restores the engine and keeps no history entry: no mark either, or
        # undo would pair the engine's previous round with this scenario position.
        events = self.engine.step()
        self._marks.append(mark)
        while len(self._marks) > self.engine.undo_available:
            self._marks.popleft()
        self._apply_due()
        self._record({"op": "step"})
        return events

    def run(self, max_steps: int = 10_000) -> int:
        """Step until the scenario is over (bounded); returns the rounds run."""
        steps = 0
        while self.can_step() and steps < max_steps:
            self.step()
            steps += 1
        return steps

    def undo(self) -> list[Event]:
        if not self._marks:
            raise ValueError("nothing to undo")
        undone = self.engine.undo()
        mark = self._marks.pop()
        self.next_event = mark.next_event
        self.clock.now = mark.clock
        del self.notes[mark.notes :]
        self._record({"op": "undo"})
        return undone

    def operations_undo_discards(self) -> list[dict[str, Any]]:
        """The operations an undo now discards along with the last round: those recorded after
        the last round still in effect (an undone round took its own with it), oldest first.
        A submit carries the id it was given as `request_id`, a rollback the tokens it removed
        as `removed` (fewer than asked where it reached the prompt)."""
        since: list[dict[str, Any]] = []
        undone = 0  # undone rounds the walk back has not passed yet
        for index in range(len(self.operations) - 1, -1, -1):
            operation = self.operations[index]
            if operation["op"] == "undo":
                undone += 1
            elif operation["op"] == "step":
                if not undone:
                    break
                undone -= 1
            elif not undone:
                named: dict[str, Any] = {}
                if index in self._submitted:
                    named["request_id"] = self._submitted[index]
                if index in self._removed:
                    named["removed"] = self._removed[index]
                since.append({**operation, **named})
        return since[::-1]

    def can_undo(self) -> bool:
        return bool(self._marks) and self.engine.undo_available > 0

    def cancel(self, request_id: str) -> bool:
        cancelled = self.engine.cancel(request_id)
        # Cancelling the last active request leaves the engine idle, where nothing steps:
        # the scenario's next events are due now (as they would be after an idle round).
        self._apply_due()
        self._record({"op": "cancel", "id": request_id})
        return cancelled

    def rollback(self, request_id: str, tokens: int = 1) -> list[int]:
        removed = self.engine.rollback(request_id, tokens)
        self._removed[len(self.operations)] = len(removed)
        # As plain ints (the engine took them, NumPy's too): the log is written as JSON.
        self._record({"op": "rollback", "id": request_id, "tokens": int(tokens)})
        return removed

    def submit(
        self,
        prompt: list[int],
        max_tokens: int = 8,
        eos_id: int | None = None,
        priority: int = 0,
        sampling: Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a request; `sampling` is SamplingParams' fields (None: greedy)."""
        request_id = self.engine.submit(
            prompt,
            max_tokens=max_tokens,
            eos_id=eos_id,
            request_id=self._free_id(),
            priority=priority,
            sampling=None if sampling is None else SamplingParams.from_dict(sampling),
        )
        self._submitted[len(self.operations)] = request_id
        settings = self.engine.settings(request_id)  # its settings as the engine keeps them
        self._record({"op": "submit", **settings})
        return request_id

    def _free_id(self) -> str:
        """The next user-N id that neither the engine nor a future scenario event uses: a
        request added by hand is named apart from the scenario's request-N ones (which may be
        reserved for later submits, so a hand-added one would otherwise skip numbers)."""
        reserved = {event.request_id for event in self.pending_events} - {None}
        taken = set(self.engine.request_ids()) | reserved
        number = 1
        while f"{HAND_ADDED_PREFIX}{number}" in taken:
            number += 1
        return f"{HAND_ADDED_PREFIX}{number}"

    def advance_clock(self, seconds: float | None = None) -> float:
        """Move the clock forward: by `seconds`, or to the next cache expiry (which expires it)."""
        if seconds is None:
            seconds = self.next_expiry_gap()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"the clock only moves forward; got {seconds!r} seconds")
        later = self.clock.now + float(seconds)
        if not math.isfinite(later):
            raise ValueError(f"moving the clock by {seconds!r} seconds would leave finite time")
        if later == self.clock.now:
            raise ValueError(
                f"{seconds!r} seconds is below the clock's precision at {self.clock.now:g}s: "
                "the clock would not move"
            )
        self.clock.now += float(seconds)
        self.notes.append(self._note(f"clock advanced to {self.clock.now:g}s"))
        self._record({"op": "clock", "seconds": float(seconds)})
        return self.clock.now

    def next_expiry_gap(self) -> float:
        """Seconds to the next hot or warm expiry (an entry expires at that instant); 1 s when
        nothing is cached."""
        now = self.clock.now
        times = [
            t
            for entry in ttl_cache_entries(self.engine.snapshot())
            for t in (entry["hot_until"], entry["warm_until"])
            if t > now
        ]
        return (min(times) - now) if times else 1.0

    def apply(self, operation: dict[str, Any]) -> None:
        """Re-execute one recorded operation (replaying a trace)."""
        op = operation.get("op")
        if op == "step":
            self.step()
        elif op == "undo":
            self.undo()
        elif op == "cancel":
            self.cancel(operation["id"])
        elif op == "rollback":
            self.rollback(operation["id"], operation.get("tokens", 1))
        elif op == "submit":
            self.submit(
                operation["prompt"],
                operation["max_tokens"],
                operation.get("eos_id"),
                operation.get("priority", 0),
                operation.get("sampling"),  # its seed too: the same tokens again
            )
        elif op == "clock":
            self.advance_clock(operation["seconds"])
        else:
            raise ValueError(f"unknown operation {op!r}")

    # -- scenario events ----------------------------------------------------------------------

    def _apply_due(self) -> None:
        events = self.scenario.events
        while self.next_event < len(events):
            event = events[self.next_event]
            due = (event.idle and self.engine.idle) or (
                event.tick is not None and (event.tick <= self.engine.tick or self.engine.idle)
            )
            if not due:
                return
            self.next_event += 1
            if event.clock is not None and event.clock > self.clock.now:
                self.clock.now = event.clock
                self.notes.append(self._note(f"clock moved to {event.clock:g}s"))
            elif event.clock is not None and event.clock < self.clock.now:
                # The clock is already past the scenario's time (moved with `t`, say): what the
                # scenario's note expects may not hold.
                caveat = ": the note below may not hold" if event.note else ""
                self.notes.append(
                    self._note(
                        f"the scenario sets the clock to {event.clock:g}s here, but it is "
                        f"already at {self.clock.now:g}s{caveat}"
                    )
                )
            if event.note:
                self.notes.append(self._note(event.note))
            if event.submit is not None:
                submit = event.submit
                self.engine.submit(
                    submit["prompt"],
                    max_tokens=submit["max_tokens"],
                    eos_id=submit.get("eos_id"),
                    request_id=event.request_id,  # chosen when the scenario was parsed
                    priority=submit.get("priority", 0),
                    sampling=sampling_of(submit),
                )
            if event.cancel is not None:
                self.engine.cancel(event.cancel)

    def _note(self, text: str) -> Event:
        return {
            "tick": self.engine.tick,
            "kind": "note",
            "request_id": None,
            "text": text,
            "trace_index": len(self.engine.trace),
        }

    # -- views --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        snapshot = self.engine.snapshot()
        snapshot["session"] = {
            "scenario": self.scenario.name,
            "description": self.scenario.description,
            "pending_events": len(self.pending_events),
            "can_step": self.can_step(),
            "can_undo": self.can_undo(),
            "finished": self.finished,
            "operations": len(self.operations),
            # Who drafts: the scenario's draft section (an n-gram drafter is no model, so the
            # engine's `models` cannot tell it from no drafts at all).
            "draft": None if self.scenario.draft is None else dict(self.scenario.draft),
        }
        return snapshot

    def log_view(self) -> LogView:
        """The same events as log(), merged incrementally: each call only adds what is new,
        unless undo rewrote the tail, which starts a fresh list (older views stay intact)."""
        merged, seen_trace, seen_notes = self._merged
        trace, notes = self.engine.trace, self.notes
        if not (
            log_still_holds(trace, seen_trace, self._last_trace_event)
            and log_still_holds(notes, seen_notes, self._last_note)
        ):
            merged = self.log()
        else:
            _merge_into(merged, trace, seen_trace, notes[seen_notes:])
        self._merged = (merged, len(trace), len(notes))
        self._last_trace_event = trace[-1] if trace else None
        self._last_note = notes[-1] if notes else None
        return LogView(merged, len(merged))

    def log(self) -> list[Event]:
        """Engine events and session notes, in the order they happened."""
        return _merge_into([], self.engine.trace, 0, self.notes)


def _merge_into(
    merged: list[Event], trace: list[Event], start: int, notes: list[Event]
) -> list[Event]:
    """Append trace[start:] and `notes` to `merged`, each note before the first trace event
    logged after it; returns `merged`."""
    pending = iter(notes)
    note = next(pending, None)
    for index in range(start, len(trace)):
        while note is not None and note["trace_index"] <= index:
            merged.append(note)
            note = next(pending, None)
        merged.append(trace[index])
    while note is not None:
        merged.append(note)
        note = next(pending, None)
    return merged
