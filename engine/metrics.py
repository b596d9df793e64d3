"""Serving metrics folded from the event trace: per-request timing and engine-wide counts.

Pure: everything here is computed from the events (and, for the KV usage, the pool counts the
views pass in). The fold is incremental: each call reads only the events appended since the
last one, and starts again from the first event when the trace was rewound (undo truncates it;
an aborted round truncates it and appends `step_aborted`).

Timing follows vLLM's metrics design document (docs/design/metrics.md, "Interval
Calculations" and "Interval Calculations vs Preemptions"):

- `queued` is the clock read at `submit`; `scheduled` the clock of the first round that
  computed rows for the request (the first `schedule` event naming it); `first_token` and
  every later token the clock of the round that committed it (a round reads its clock once,
  when it starts); `finished` the clock of the round it finished in (a request cancelled
  between rounds takes the last reading the engine made before it: that round's, or a later
  submit's).
- `preemptions` counts the request's `preempt` events; `recomputed_positions` the work they
  cost: at each readmission after one, the positions it had stored when preempted less those
  the cache gave back (the preempt event's `recompute_positions` is only the estimate made
  then: the cache may lose the prefix, or another request's may cover more, before it runs).
- queue_time = scheduled - queued; ttft = first_token - queued; prefill_time = first_token -
  scheduled; decode_time = last token - first_token; e2e = finished - queued.
- A preemption does not restart any interval (vLLM keeps the first SCHEDULED): the time
  lost to it falls in the interval it happened in, so a preemption during prefill lengthens
  ttft and prefill_time, one during decode the inter-token latency and decode_time.
- Inter-token latencies, one per committed token after the first: a round that commits k
  tokens gives k intervals, the first the whole gap since the request's previous commit and
  the others 0 (the first round's extra tokens give zeros). vLLM's own iteration stats take
  one sample per request per iteration; counting per token keeps sum(itl) == decode_time and
  mean(itl) equal to the time per output token, which is what the counting here is for.

Speculation follows vLLM's spec-decode metrics: `mean_acceptance_length` = 1 + accepted /
drafting rounds (a drafting round: one request's verification with at least one draft node
verified; the 1 is the token the target adds itself, the bonus or replacement).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from .request import Event, EventLog

# The synthetic clock's cost of a round without a cost curve: seconds per computed row.
SECONDS_PER_ROW = 1e-3


def synthetic_cost(rows: int, cost_curve: tuple[tuple[int, float], ...] | None) -> float:
    """Seconds a round of `rows` computed rows takes on the synthetic clock: the cost of the
    smallest curve size that holds them (beyond the last size, its cost per row), or
    SECONDS_PER_ROW per row without a curve."""
    if not cost_curve:
        return rows * SECONDS_PER_ROW
    sizes = [size for size, _ in cost_curve]
    index = bisect_left(sizes, rows)
    if index == len(sizes):
        size, cost = cost_curve[-1]
        return cost * rows / size
    return float(cost_curve[index][1])


@dataclass
class _Request:
    """What the trace says of one request so far (rounds; clocks are looked up at the end)."""

    queued: float | None = None
    queued_round: int = 0
    scheduled_round: int | None = None
    token_rounds: list[int] = field(default_factory=list)  # the round of each generated token
    itl: list[float] = field(default_factory=list)  # folded as tokens come: no walk per read
    finished_round: int | None = None
    finished_fallback: float | None = None  # the last reading before it, if its round has none
    preemptions: int = 0
    recomputed_positions: int = 0
    lost: int | None = None  # positions stored when last preempted, until it runs again
    reused: int = 0  # positions its latest admission restored from the cache


class Observer:
    """Folds the trace as it grows; see the module docstring for what each number means."""

    def __init__(self, log: EventLog) -> None:
        self.log = log  # read only
        self._reset()

    def _reset(self) -> None:
        self.seen = 0
        self.last: Event | None = None  # the last event folded: tells a rewind apart
        self.requests: dict[str, _Request] = {}
        self.round_ticks: list[int] = []  # rounds that computed rows, and their clocks
        self.round_clocks: list[float] = []
        self.latest: float | None = None  # the last clock reading seen
        self.verified_by_depth: list[int] = []
        self.accepted_by_depth: list[int] = []
        self.drafting_rounds = 0
        self.accepted = 0
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0
        self.preemptions = 0
        self.recomputed_positions = 0
        self.kept_positions = 0
        self.synthetic_seconds = 0.0
        self.timings: dict[str, dict[str, Any]] = {}  # built since the last event folded

    def catch_up(self) -> None:
        events = self.log.events
        if self.seen > len(events) or (self.seen and events[self.seen - 1] is not self.last):
            self._reset()  # rewound: the events folded are not all there any more
        if self.seen == len(events):
            return
        for event in events[self.seen :]:
            self._fold(event)
        self.timings.clear()
        self.seen = len(events)
        self.last = events[-1] if events else None

    # -- folding ----------------------------------------------------------------------------

    def _fold(self, event: Event) -> None:
        kind, tick = event["kind"], event["tick"]
        request = self.requests.get(event["request_id"] or "")
        if kind == "queued":
            request = self.requests[event["request_id"]] = _Request(event.get("clock"), tick)
            if request.queued is not None:
                self.latest = request.queued
        elif kind == "schedule":
            self._fold_schedule(event)
        elif request is None:
            return
        elif kind == "commit":
            self._add_tokens(request, tick, len(event["tokens"]))
            if event["verified"]:
                self.drafting_rounds += 1
                self.accepted += event["accepted"]
        elif kind == "verify":
            self._fold_verify(event["nodes"])
        elif kind == "restore":
            self._fold_restore(request, event["reused_positions"], event["suffix_positions"])
        elif kind == "preempt":
            request.preemptions += 1
            request.lost = event["lost_positions"]
            self.preemptions += 1
            self.kept_positions += event["kept_positions"]
        elif kind == "finished":
            request.finished_round, request.finished_fallback = tick, self.latest
        elif kind == "rollback" and event["removed"]:  # removing nothing reopens nothing
            kept = len(request.token_rounds) - len(event["removed"])
            del request.token_rounds[kept:], request.itl[max(0, kept - 1) :]
            request.finished_round = request.finished_fallback = None  # reopened

    def _add_tokens(self, request: _Request, tick: int, count: int) -> None:
        """`count` tokens committed in round `tick`: k tokens give k intervals (the gap since
        the previous token, then k - 1 zeros), as vLLM counts them."""
        if not count:
            return
        if request.token_rounds:
            gap = self.clock_of(tick) - self.clock_of(request.token_rounds[-1])  # type: ignore[operator]
            request.itl.append(gap)
        request.itl.extend([0.0] * (count - 1))
        request.token_rounds.extend([tick] * count)

    def _fold_schedule(self, event: Event) -> None:
        tick = event["tick"]
        clock = event.get("clock")
        if clock is not None:
            self.round_ticks.append(tick)
            self.round_clocks.append(clock)
            self.latest = clock
        self.synthetic_seconds += event.get("synthetic_seconds", 0.0)
        for part in event["requests"]:
            request = self.requests.get(part["request_id"])
            if request is None:
                continue
            if request.scheduled_round is None:
                request.scheduled_round = tick
            if request.lost is not None:  # runs again after a preemption
                recomputed = max(0, request.lost - request.reused)
                request.recomputed_positions += recomputed
                self.recomputed_positions += recomputed
                request.lost = None

    def _fold_restore(self, request: _Request, reused: int, suffix: int) -> None:
        self.prefix_query_tokens += reused + suffix
        self.prefix_hit_tokens += reused
        request.reused = reused  # an admission that gives its place back is restored again

    def _fold_verify(self, nodes: list[dict[str, Any]]) -> None:
        for node in nodes:  # a discarded node was verified too: below a rejected one
            if node["verdict"] not in ("accepted", "rejected", "discarded"):
                continue
            depth = node["depth"]
            while len(self.verified_by_depth) < depth:
                self.verified_by_depth.append(0)
                self.accepted_by_depth.append(0)
            self.verified_by_depth[depth - 1] += 1
            self.accepted_by_depth[depth - 1] += node["verdict"] == "accepted"

    # -- reading ----------------------------------------------------------------------------

    def clock_of(self, tick: int | None, fallback: float | None = None) -> float | None:
        """The clock reading of round `tick` (None: no round computed rows then)."""
        if tick is None:
            return None
        index = bisect_right(self.round_ticks, tick) - 1
        if index >= 0 and self.round_ticks[index] == tick:
            return self.round_clocks[index]
        return fallback

    def timing(self, request_id: str) -> dict[str, Any]:
        """The request's timing as a plain dict (see the module docstring), shared by every
        caller until the trace grows (viewers read views, never write them)."""
        self.catch_up()
        timing = self.timings.get(request_id)
        if timing is None:
            timing = self.timings[request_id] = self._timing(request_id)
        return timing

    def _timing(self, request_id: str) -> dict[str, Any]:
        request = self.requests.get(request_id, _Request())
        rounds = request.token_rounds
        queued = request.queued
        scheduled = self.clock_of(request.scheduled_round)
        first = self.clock_of(rounds[0]) if rounds else None
        last = self.clock_of(rounds[-1]) if rounds else None
        finished = self.clock_of(request.finished_round, request.finished_fallback)
        if finished is not None and request.finished_fallback is not None:
            # A cancel after its round (and maybe a submit): the reading made last before it.
            finished = max(finished, request.finished_fallback)
        return {
            "queued": queued,
            "scheduled": scheduled,
            "first_token": first,
            "finished": finished,
            "queued_round": request.queued_round,
            "scheduled_round": request.scheduled_round,
            "first_token_round": rounds[0] if rounds else None,
            "finished_round": request.finished_round,
            "queue_time": _interval(queued, scheduled),
            "ttft": _interval(queued, first),
            "prefill_time": _interval(scheduled, first),
            "decode_time": _interval(first, last),
            "e2e": _interval(queued, finished),
            "itl": list(request.itl),  # a copy: the fold goes on growing its own
            "preemptions": request.preemptions,
            "recomputed_positions": request.recomputed_positions,
        }

    def serving(self, *, synthetic: bool, held_blocks: int, total_blocks: int) -> dict[str, Any]:
        """The engine-wide section of metrics()."""
        self.catch_up()
        by_depth = [
            {
                "depth": depth,
                "verified": verified,
                "accepted": accepted,
                "rate": accepted / verified if verified else None,
            }
            for depth, (verified, accepted) in enumerate(
                zip(self.verified_by_depth, self.accepted_by_depth), start=1
            )
        ]
        rounds, queries = self.drafting_rounds, self.prefix_query_tokens
        return {
            "clock": "synthetic" if synthetic else "injected",
            "synthetic_seconds": self.synthetic_seconds,
            "kv_usage": held_blocks / total_blocks if total_blocks else 0.0,
            "prefix_query_tokens": queries,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "prefix_hit_rate": self.prefix_hit_tokens / queries if queries else None,
            "acceptance_by_depth": by_depth,
            "drafting_rounds": rounds,
            "mean_acceptance_length": 1 + self.accepted / rounds if rounds else None,
            "preemptions": self.preemptions,
            "recomputed_positions": self.recomputed_positions,
            "kept_positions": self.kept_positions,
        }

    def synthetic_offset(self) -> float:
        """The seconds the synthetic clock has added, as the trace now records them."""
        self.catch_up()
        return self.synthetic_seconds


def _interval(start: float | None, stop: float | None) -> float | None:
    return None if start is None or stop is None else stop - start
