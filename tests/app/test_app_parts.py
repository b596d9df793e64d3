"""The app's small parts on plain values: auto-run's ticks, the collector pause, the toasts'
replacement and the undo notice (the Pilot tests drive the same parts through the keys)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from time import time

from textual.notifications import Notification

from deepinfer_tui.auto_run import AutoRun
from deepinfer_tui.collector import GC_PAUSE_LIMIT, CollectorTuning
from deepinfer_tui.toasts import Toasts
from deepinfer_tui.undo_notice import undo_notice
from deepinfer_tui.widgets.view import ComputingRound


@dataclass
class FakeTimer:
    interval: float
    callback: Callable[[], object]
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True


@dataclass
class FakeHost:
    rounds_left: int = 10
    closing: bool = False
    computing: ComputingRound | None = None
    auto_waiting: str | None = None
    steps: int = 0
    refreshes: int = 0
    said_limit: list[int] = field(default_factory=list)
    timers: list[FakeTimer] = field(default_factory=list)

    def set_interval(self, interval: float, callback: Callable[[], object]) -> FakeTimer:
        self.timers.append(FakeTimer(interval, callback))
        return self.timers[-1]

    def can_step(self) -> bool:
        return self.rounds_left > 0

    def step_once(self) -> bool:
        self.steps += 1
        self.rounds_left -= 1
        return True

    def refresh_view(self) -> None:
        self.refreshes += 1

    def say_paused_at_limit(self, limit: int) -> None:
        self.said_limit.append(limit)


def test_auto_run_steps_once_a_tick_and_stops_at_the_end_without_a_notice() -> None:
    host = FakeHost(rounds_left=2)
    auto = AutoRun(host)  # type: ignore[arg-type]
    auto.start(0.25, limit=500)
    assert auto.running and host.timers[0].interval == 0.25
    for _ in range(3):
        auto.tick()
    assert host.steps == 2 and not auto.running and host.timers[0].stopped
    assert host.said_limit == []


def test_auto_run_pauses_at_its_limit_and_says_so() -> None:
    host = FakeHost(rounds_left=10)
    auto = AutoRun(host)  # type: ignore[arg-type]
    auto.start(0.25, limit=3)
    for _ in range(5):
        auto.tick()
    assert host.steps == 3 and not auto.running and host.said_limit == [3]


def test_auto_run_waits_while_a_round_computes_or_a_dialog_is_open() -> None:
    host = FakeHost(computing=ComputingRound(1, 5000))
    auto = AutoRun(host)  # type: ignore[arg-type]
    auto.start(0.25, limit=500)
    auto.tick()
    assert host.steps == 0 and host.refreshes == 0
    host.computing, host.auto_waiting = None, "the help"
    auto.tick()
    auto.tick()
    assert host.steps == 0 and host.refreshes == 1  # the header says it waits, once
    host.auto_waiting = None
    auto.tick()
    assert host.steps == 1 and host.refreshes == 2  # and says when it is over
    assert auto.running


def test_a_tick_on_a_closing_app_stops_the_timer_and_does_nothing_else() -> None:
    host = FakeHost()
    auto = AutoRun(host)  # type: ignore[arg-type]
    auto.start(0.25, limit=500)
    host.closing = True
    auto.tick()
    assert not auto.running and host.timers[0].stopped
    assert host.steps == 0 and host.refreshes == 0


def test_the_collector_pause_ends_with_the_frame_or_its_time_limit() -> None:
    collector = CollectorTuning()
    after_frame: list[Callable[[], None]] = []
    limits: list[FakeTimer] = []

    def set_timer(delay: float, callback: Callable[[], None]) -> FakeTimer:
        limits.append(FakeTimer(delay, callback))
        return limits[-1]

    assert gc.isenabled()
    try:
        collector.pause_until_painted(lambda c: after_frame.append(c) or True, set_timer)
        assert collector.paused and not gc.isenabled() and limits[0].interval == GC_PAUSE_LIMIT
        after_frame[0]()  # the frame is painted
        assert not collector.paused and gc.isenabled() and limits[0].stopped
        collector.pause_until_painted(lambda c: False, set_timer)  # no frame will follow
        assert not collector.paused and gc.isenabled() and len(limits) == 1
    finally:
        collector.restore()
    assert gc.isenabled()


def test_the_collector_threshold_is_raised_while_the_app_runs_and_restored() -> None:
    before = gc.get_threshold()
    collector = CollectorTuning()
    collector.raise_threshold()
    try:
        assert gc.get_threshold()[0] >= max(before[0], 10_000)
    finally:
        collector.restore()
    assert gc.get_threshold() == before


def note(message: str, timeout: float = 5, age: float = 0.0) -> Notification:
    return Notification(message, "Not now", "warning", timeout, raised_at=time() - age)


def test_a_repeated_toast_moves_to_the_newest_and_the_others_keep_their_order() -> None:
    toasts = Toasts()
    for message in ("a", "b", "c"):
        assert toasts.arrived(note(message, age=1.0)).show
    arrival = toasts.arrived(note("a"))
    assert not arrival.show
    assert [n.message for n in arrival.reshow] == ["b", "c", "a"]
    b, c, a = arrival.reshow
    assert 3.5 < b.timeout < 4.5 and 3.5 < c.timeout < 4.5  # the time they had left
    assert a.timeout == 5  # the repeat: its full time
    assert all(toasts.arrived(n).show for n in arrival.reshow)  # the copies arrive: shown


def test_a_burst_of_repeats_ends_in_one_toast_with_the_last_ones_time() -> None:
    """Under load the copies posted for one repeat arrive after the next repeats: the older
    copies are dropped, so the toast shown is the last repeat's, with its full time (an
    early copy kept the first press's expiry and vanished while the key was still refused)."""
    toasts = Toasts()
    assert toasts.arrived(note("nothing to undo", timeout=3, age=2.9)).show
    first = toasts.arrived(note("nothing to undo", timeout=3, age=2.0))
    last = toasts.arrived(note("nothing to undo", timeout=3))  # before `first`'s copy came
    (early,) = first.reshow
    (kept,) = last.reshow
    assert not toasts.arrived(early).show  # superseded on its way
    assert toasts.arrived(kept).show and kept.timeout == 3
    assert not toasts.arrived(note("nothing to undo")).show  # still one on screen


def test_an_expired_toast_is_not_a_repeat_and_is_not_shown_again() -> None:
    toasts = Toasts()
    assert toasts.arrived(note("gone", timeout=1, age=2)).show
    assert toasts.arrived(note("kept")).show
    assert toasts.arrived(note("gone")).show  # not a repeat: the first one has expired
    arrival = toasts.arrived(note("kept"))
    assert [n.message for n in arrival.reshow] == ["gone", "kept"]


def test_the_undo_notice_names_what_went_and_says_auto_run_paused() -> None:
    assert undo_notice(3, [], paused_auto_run=False) is None
    assert undo_notice(3, [], paused_auto_run=True) == (
        "Undid round 3. Auto-run paused: press r to run on"
    )
    discarded = [
        {"op": "submit", "request_id": "request-9"},
        {"op": "cancel", "id": "request-2"},
        {"op": "rollback", "id": "request-1", "tokens": 10, "removed": 3},
        {"op": "clock", "seconds": 2.5},
    ]
    assert undo_notice(4, discarded, paused_auto_run=False) == (
        "Undid round 4 and what was done after it: request-9's submission, cancelling "
        "request-2, rolling request-1 back 3 tokens (asked for 10), the clock move of 2.5s"
    )
