"""The live session's actions: the only code that changes the session.

Each runs one session operation and redraws; an engine refusal becomes a notification, never
a crash (the engine restores itself). A round too long for the event loop runs on a thread
of its own (`background_round`); auto-run's timer lives in `auto_run` and steps through here.
A mixin of `DebuggerApp`, whose state it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .auto_run import next_wait
from .background_round import RoundComputed, compute_round
from .describe import error_message
from .request_form import NewRequest
from .screens.add_request import AddRequestScreen
from .screens.rollback import RollbackScreen
from .undo_notice import undo_notice
from .widgets import RequestTable
from .widgets.view import ComputingRound

if TYPE_CHECKING:
    from .app import DebuggerApp

ENGINE_ERRORS = (ValueError, KeyError, RuntimeError)


class LiveActions:
    def _mutate(self: DebuggerApp, operation: Callable[[], object]) -> bool:
        """Run one session operation; an engine refusal becomes a notification."""
        self._pause_gc_until_painted()
        done = False
        try:
            operation()
            done = True
        except Exception as error:  # the engine restores itself; the debugger must stay up
            self._report_failure(error)
        self.refresh_view()
        return done

    def _report_failure(self: DebuggerApp, error: BaseException) -> None:
        if isinstance(error, ENGINE_ERRORS):
            self.notify(error_message(error), title="Not done", severity="error")
            return
        self.notify(
            f"{type(error).__name__}: {error_message(error)}",
            title="Engine failure (state restored)",
            severity="error",
            timeout=15,
        )

    def action_step(self: DebuggerApp) -> None:
        self.step_once()

    def step_once(self: DebuggerApp) -> bool:
        """Run one round: here, or on its own thread when it is long (then True means
        started, and `on_round_computed` reports how it ended)."""
        positions = self.engine.pending_positions()
        if positions < self.BACKGROUND_POSITIONS:
            return self._mutate(self._session.step)
        self._computing = ComputingRound(self.engine.tick + 1, positions)
        compute_round(self._session, self._computing, self)
        self.refresh_view()
        return True

    def on_round_computed(self: DebuggerApp, message: RoundComputed) -> None:
        self._computing = None
        if self.closing:
            return
        if message.error is not None:
            self._report_failure(message.error)
            self._auto_run.stop()
        self.refresh_view()

    def action_undo(self: DebuggerApp) -> None:
        # The engine rewinds to before the last round: what was done since goes too, so say it.
        discarded = self._session.operations_undo_discards()
        undone_round = self.engine.tick
        if not self._mutate(self._session.undo):
            return
        # Auto-run would run the undone round again at its next tick: going back pauses it.
        paused = self.auto_running
        if paused:
            self._auto_run.stop()
            self.refresh_view()  # the header stops saying so
        said = undo_notice(undone_round, discarded, paused)
        if said is not None:
            self.notify(said, title="Undone", timeout=8)

    def action_advance_clock(self: DebuggerApp) -> None:
        self._mutate(self._session.advance_clock)

    def action_cancel_request(self: DebuggerApp) -> None:
        request_id = self.selected_id
        if request_id is not None:
            self._mutate(lambda: self._session.cancel(request_id))

    def action_rollback(self: DebuggerApp) -> None:
        request_id = self.selected_id
        if request_id is not None:
            self._mutate(lambda: self._session.rollback(request_id, 1))

    def action_rollback_many(self: DebuggerApp) -> None:
        request = self.view.request(self.selected_id)
        if request is None:
            return
        request_id = str(request["id"])

        def roll_back(count: int) -> list[int]:
            removed = self._session.rollback(request_id, count)
            self.refresh_view()
            return removed

        self.push_screen(RollbackScreen(request_id, len(request["generated"]), roll_back))

    def action_add_request(self: DebuggerApp) -> None:
        def submit(new: NewRequest) -> str:
            request_id = self._session.submit(
                new.prompt, new.max_tokens, new.eos_id, new.priority, new.sampling
            )
            self.refresh_view()
            return request_id

        def select(request_id: str | None) -> None:
            if request_id is not None and not self.closing:
                self.query_one(RequestTable).select(request_id)

        vocab = self.view.snapshot.get("models", {}).get("target", {}).get("vocab_size", 0)
        self.push_screen(AddRequestScreen(submit, int(vocab)), select)

    # -- auto-run (`auto_run` steps; these are what it asks of the app) ----------------------

    def action_toggle_run(self: DebuggerApp) -> None:
        if self._auto_run.running:
            self._auto_run.stop()
        else:
            self._auto_run.start(self.auto_interval, self.AUTO_RUN_LIMIT)
        self.refresh_view()

    @property
    def auto_interval(self: DebuggerApp) -> float:
        """Seconds between auto-run's rounds: AUTO_RUN_INTERVAL until a speed key sets it."""
        return self.AUTO_RUN_INTERVAL if self._auto_wait is None else self._auto_wait

    def action_run_faster(self: DebuggerApp) -> None:
        self._change_speed(faster=True)

    def action_run_slower(self: DebuggerApp) -> None:
        self._change_speed(faster=False)

    def _change_speed(self: DebuggerApp, *, faster: bool) -> None:
        try:
            wait = next_wait(self.auto_interval, faster=faster)
        except ValueError as error:
            self.notify(str(error), title="Auto-run speed", severity="warning", timeout=4)
            return
        self._auto_wait = wait
        self._auto_run.retime(wait)
        state = "" if self.auto_running else " (press r to run)"
        self.notify(f"a round every {wait:g} s{state}", title="Auto-run speed", timeout=3)
        self.refresh_view()

    def can_step(self: DebuggerApp) -> bool:
        return self._session.can_step()

    def say_paused_at_limit(self: DebuggerApp, limit: int) -> None:
        self.notify(
            f"Auto-run paused after {limit} rounds, its limit per run; press r to run on",
            title="Auto-run paused",
            timeout=10,
        )
