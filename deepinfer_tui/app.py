"""The debugger app: wires the panes to a Session (or a read-only replay).

Flow: an action mutates the session -> `refresh_view()` builds one immutable `View`
(snapshot + log) -> every pane renders from it. Widgets never touch the session.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.containers import Grid
from textual.notifications import Notify, SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable
from textual.worker import Worker, WorkerState

from engine import Engine

from .background_round import RoundComputed, compute_round
from .commands import ClosingOncePalette, DebuggerCommands, PaletteAction
from .describe import error_message, plural
from .export import (
    DEFAULT_EXPORT_DIR,
    export_all,
    free_stem,
    make_export_folder,
    safe_name,
    write_atomically,
)
from .screens.add_request import AddRequestScreen
from .screens.help import HelpScreen, KeyHelp
from .screens.rollback import RollbackScreen
from .session import Session
from .widgets import BlockMap, CommitLog, DraftTree, ReplayPosition, RequestTable, StatusBar
from .widgets.footer import KeyFooter
from .widgets.status import DescriptionLine
from .widgets.view import ComputingRound, View

# A keypress at 64 active requests allocates tens of thousands of short-lived objects (the
# snapshot view, strips, segments). At CPython's default young-generation threshold (700)
# many are still alive when a collection runs, get promoted, and soon trigger a collection
# of the whole heap: 50-80 ms pauses every few keypresses. With a larger threshold they die
# young. The threshold is process-wide: the app raises it while it runs and restores it.
GC_YOUNG_THRESHOLD = 10_000
# A keypress's collector pause ends with its frame, and at the latest after this many seconds.
GC_PAUSE_LIMIT = 1.0


class ReplayFrame(Protocol):
    # Read-only members: a replay's own frames may hold narrower types (dict, list).
    @property
    def snapshot(self) -> Mapping[str, Any]: ...

    @property
    def log(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def label(self) -> str: ...


class ReplayLike(Protocol):
    """What the app needs from `deepinfer_tui.replay.Replay` (read-only stepping)."""

    @property
    def frames(self) -> Sequence[ReplayFrame]: ...

    @property
    def position(self) -> int: ...

    @property
    def divergence(self) -> str | None: ...

    @property
    def current(self) -> ReplayFrame: ...

    def forward(self) -> bool: ...

    def back(self) -> bool: ...

    def session_at(self, position: int) -> Session: ...


# Actions that change the session; all are off in replay mode and while an export runs.
MUTATING = frozenset(
    {
        "step",
        "toggle_run",
        "cancel_request",
        "rollback",
        "rollback_many",
        "undo",
        "add_request",
        "advance_clock",
    }
)
REPLAY_ONLY = frozenset({"frame_forward", "frame_back"})
DEBUGGER_ACTIONS = MUTATING | REPLAY_ONLY | {"filter_log", "export", "save_screen", "guide"}
# Actions that also act over another screen: a screenshot of a dialog or the guide is useful.
OVER_ANY_SCREEN = frozenset({"save_screen"})
# Keys the footer drops on narrow terminals, and more on tiny ones, so help and quit stay in
# view (every key still works, and help and the palette list them all).
MINOR_ACTIONS = frozenset({"filter_log", "export", "guide"})
SECONDARY_ACTIONS = frozenset({"toggle_run", "rollback", "add_request", "advance_clock"})
TINY_BELOW = 80  # columns
NARROW_BELOW = 110
ENGINE_ERRORS = (ValueError, KeyError, RuntimeError)


def _key_label(keys: str) -> str:
    names = {"question_mark": "?", "backspace": "⌫"}
    return " ".join(names.get(k.strip(), k.strip()) for k in keys.split(","))


class DebuggerApp(App[None]):
    """Step, cancel, roll back and inspect a live engine session (or replay a saved one)."""

    CSS_PATH = "app.tcss"
    TITLE = "deepinfer-tui"
    COMMANDS: ClassVar = App.COMMANDS | {DebuggerCommands}
    # Textual annotates these as instance attributes; ruff wants class-level lists as ClassVars.
    HORIZONTAL_BREAKPOINTS: ClassVar = [  # type: ignore[misc]
        (0, "-tiny"),
        (TINY_BELOW, "-narrow"),
        (NARROW_BELOW, "-medium"),
        (150, "-wide"),
    ]
    VERTICAL_BREAKPOINTS: ClassVar = [(0, "-short"), (32, "-tall")]  # type: ignore[misc]
    AUTO_RUN_INTERVAL = 0.25  # seconds between auto-stepped rounds: slow enough to watch
    AUTO_RUN_LIMIT = 500  # rounds per `r` press, so a runaway scenario cannot spin forever
    # A round that computes this many positions before its first token (a long prefill) runs
    # on a thread, so the screen stays live: 4096 positions take ~0.2 s on this machine.
    BACKGROUND_POSITIONS = 4096

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,n", "step", "step", tooltip="Run one engine round", id="step"),
        Binding(
            "space,n", "frame_forward", "next", tooltip="Replay: next frame", id="frame_forward"
        ),
        Binding(
            "u,backspace",
            "frame_back",
            "back",
            tooltip="Replay: previous frame",
            id="frame_back",
        ),
        Binding("r", "toggle_run", "run", tooltip="Run / pause auto-stepping", id="toggle_run"),
        Binding(
            "c",
            "cancel_request",
            "cancel",
            tooltip="Cancel the selected request",
            id="cancel_request",
        ),
        Binding(
            "b",
            "rollback",
            "rollback",
            tooltip="Roll the selected request back 1 token",
            id="rollback",
        ),
        Binding(
            "B",
            "rollback_many",
            "rollback N",
            tooltip="Roll the selected request back N tokens (asks N)",
            id="rollback_many",
            show=False,
        ),
        Binding(
            "u",
            "undo",
            "undo",
            tooltip="Undo the last round and anything done since it",
            id="undo",
        ),
        Binding("a", "add_request", "add", tooltip="Add a request (asks tokens)", id="add_request"),
        Binding(
            "t",
            "advance_clock",
            "clock",
            tooltip="Advance the clock to the next cache expiry",
            id="advance_clock",
        ),
        Binding(
            "f",
            "filter_log",
            "filter",
            tooltip="Log: only the selected request / all",
            id="filter_log",
        ),
        Binding("e", "export", "export", tooltip="Export a trace snapshot (files)", id="export"),
        Binding(
            "ctrl+s",
            "save_screen",
            "screenshot",
            tooltip="Save this screen as an SVG",
            id="save_screen",
            show=False,
            priority=True,  # dialogs (modal screens) keep the app's other keys from them
        ),
        Binding("g", "guide", "guide", tooltip="Open the guide chapters", id="guide"),
        Binding("question_mark,f1", "help", "help", tooltip="Keys, panes and legend", id="help"),
        Binding("q", "quit", "quit", tooltip="Quit", id="quit"),
    ]

    def __init__(
        self,
        session: Session,
        *,
        export_dir: Path | None = None,
        replay: ReplayLike | None = None,
    ) -> None:
        super().__init__()
        self._session = session
        self.export_dir = Path(export_dir) if export_dir is not None else DEFAULT_EXPORT_DIR
        self.replay = replay
        self._table: RequestTable | None = None  # once mounted
        self._shown_id: str | None = None  # the request the detail panes show
        self.filter_log = False
        self._auto_timer: Timer | None = None
        self._auto_steps = 0
        self._auto_shown_waiting: str | None = None  # what the header last said auto-run waits for
        self._exporting = False
        self._quit_after_export = False
        self._computing: ComputingRound | None = None  # a round running on its own thread
        self._palette_opened = self._palette_ran = 0  # palette openings; the last that ran
        self._binding_states: tuple[bool | None, ...] = ()
        self._gc_threshold: tuple[int, ...] | None = None  # the process's, while we run
        self._gc_paused = False  # we disabled the collector until the next frame is painted
        self.view: View = self._build_view()

    # -- what the app debugs ------------------------------------------------------------------

    @property
    def session(self) -> Session:
        return self._session

    @property
    def engine(self) -> Engine:
        return self._session.engine

    @property
    def computing(self) -> ComputingRound | None:
        """The round being computed on its own thread, if any (the session is its own then)."""
        return self._computing

    @property
    def auto_running(self) -> bool:
        return self._auto_timer is not None

    @property
    def auto_waiting(self) -> str | None:
        """Why auto-run holds its next round now (None: it does not)."""
        if self._auto_timer is None:
            return None
        if self._exporting:
            return "the export"
        if len(self.screen_stack) > 1:
            return self._screen_name(self.screen_stack[-1])
        return None

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield DescriptionLine(self._session.scenario.description, id="description")
        with Grid(id="panes"):
            yield RequestTable(id="requests")
            yield BlockMap(id="blocks")
            yield DraftTree(id="tree")
            yield CommitLog(id="log")
        yield KeyFooter({"-minor": MINOR_ACTIONS, "-secondary": SECONDARY_ACTIONS}, id="footer")

    def on_mount(self) -> None:
        self._gc_threshold = gc.get_threshold()
        young, *older = self._gc_threshold
        gc.set_threshold(max(young, GC_YOUNG_THRESHOLD), *older)
        table = self._table = self.query_one(RequestTable)
        table.border_title = "Requests"
        self.refresh_view()
        table.focus()

    def on_unmount(self) -> None:
        self._stop_auto_run()
        self._resume_gc()
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
            self._gc_threshold = None

    def _pause_gc_until_painted(self) -> None:
        """Hold garbage collection until the next frame is on screen.

        Collections that do happen during a keypress still cost it: a young collection
        traverses whatever the round has built so far (the snapshot alone is tens of thousands
        of objects), and every tenth one also traverses the older survivors (~10 ms). Paused
        from a key's action until its frame is painted, they run in the idle time after the
        frame instead. Nothing is skipped: the same objects are collected, only later.
        """
        if self._gc_paused or not gc.isenabled():
            return  # already paused, or disabled by someone else (theirs to turn back on)
        gc.disable()
        self._gc_paused = True
        if not self.call_after_refresh(self._resume_gc):
            self._resume_gc()  # the app is closing: no frame will follow
            return
        # A screen pushed and popped before the frame (the guide, say) can drop that callback:
        # the collector must never stay off for good.
        self.set_timer(GC_PAUSE_LIMIT, self._resume_gc, name="resume gc")

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    # -- the one refresh path -----------------------------------------------------------------

    def _build_view(self) -> View:
        if self._computing is not None:
            # The round's thread is changing the session: show what was there, and why.
            return replace(
                self.view,
                computing=self._computing,
                auto_running=self.auto_running,
                auto_waiting=self.auto_waiting,
            )
        if self.replay is not None:
            frame = self.replay.current
            position = ReplayPosition(
                index=self.replay.position,
                count=len(self.replay.frames),
                label=frame.label,
                divergence=self.replay.divergence,
            )
            return View(frame.snapshot, frame.log, replay=position)
        return View(
            self._session.snapshot(),
            self._session.log_view(),
            auto_running=self.auto_running,
            auto_waiting=self.auto_waiting,
        )

    @property
    def closing(self) -> bool:
        """True once the app has begun to close: its panes are going or gone, so a timer,
        worker or thread that reports now must leave the screen and the session alone."""
        return not self.is_running

    def refresh_view(self) -> None:
        """Rebuild the view from the session/replay and let every pane render it."""
        if self.closing:
            return
        self._pause_gc_until_painted()
        self.view = self._build_view()
        # One batch: the panes' updates reach the screen together, in one repaint.
        with self.batch_update():
            table = self.query_one(RequestTable)
            table.show(self.view)
            self.query_one(StatusBar).show(self.view)
            self._show_selection()
            self._refresh_bindings_if_changed()

    @property
    def selected_id(self) -> str | None:
        """The request under the table's cursor, read when asked: a key that arrives in the
        same burst as an arrow key acts on the row the cursor is on now, not on the row whose
        highlight message is still queued behind it."""
        return self._table.selected_id if self._table is not None else None

    def _show_selection(self) -> None:
        selected = self._shown_id = self.selected_id
        self.query_one(BlockMap).show(self.view, selected)
        self.query_one(DraftTree).show(self.view, selected)
        self.query_one(CommitLog).show(self.view, selected if self.filter_log else None)

    def _sync_selection(self) -> None:
        """Show the cursor's request in the detail panes if they still show another."""
        if not self.closing and self.selected_id != self._shown_id:
            self._pause_gc_until_painted()
            self._show_selection()
            self._refresh_bindings_if_changed()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "requests":
            self._sync_selection()

    # -- availability (greys out Footer keys; also guards the palette) ------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in DEBUGGER_ACTIONS - OVER_ANY_SCREEN and self._covered():
            return False  # another screen (guide, dialog) owns the keys until it closes
        return self._availability(action)

    def _covered(self) -> bool:
        """True while another screen (a dialog, the guide, help) is open, with or without the
        command palette over it."""
        return any(not isinstance(s, CommandPalette) for s in self.screen_stack[1:])

    @staticmethod
    def _screen_name(screen: Screen[Any]) -> str:
        if isinstance(screen, CommandPalette):
            return "the command palette"
        # By name: the guide's module is imported on first use (see action_guide).
        names = {"GuideScreen": "the guide", "HelpScreen": "the help"}
        return names.get(type(screen).__name__, "the dialog")

    def _in_this_mode(self, action: str) -> bool:
        """False for the keys of the other mode: replay stepping live, mutations in a replay."""
        if action in REPLAY_ONLY:
            return self.replay is not None
        if action in MUTATING:
            return self.replay is None
        return True

    def _availability(self, action: str) -> bool | None:
        """True: can act; None: could, but not now (dimmed); False: not in this mode."""
        if not self._in_this_mode(action):
            return False
        return True if self._blocker(action) is None else None

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        # Messages carry request ids, scenario names, paths and errors: plain text by default.
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def on_notify(self, event: Notify) -> None:
        """A notification already on screen is replaced, not stacked: a blocked key pressed
        30 times showed 30 toasts over half the screen. Runs before App adds the new one.

        Textual has no public way to withdraw one notification, hence its private helpers."""
        new = event.notification
        for shown in list(self._notifications):
            same = (shown.message, shown.title, shown.severity, shown.markup)
            if same == (new.message, new.title, new.severity, new.markup):
                self._unnotify(shown, refresh=False)

    def on_key(self, event: events.Key) -> None:
        """A debugger key that cannot act now says why (its binding is dimmed or hidden, and
        Textual passes the key on here instead of running it)."""
        if self._covered():
            return
        actions = [
            binding.action
            for binding in self.BINDINGS
            if isinstance(binding, Binding)
            and event.key in (key.strip() for key in binding.key.split(","))
            and binding.action in DEBUGGER_ACTIONS
        ]
        if not actions or any(self._availability(action) for action in actions):
            return
        mine = [action for action in actions if self._in_this_mode(action)]
        self._refuse(mine[0] if mine else actions[0])

    def refusal(self, action: str) -> str:
        """Why `action` cannot act now, in the user's words: a key and its palette entry
        give the same reason."""
        if action in DEBUGGER_ACTIONS - OVER_ANY_SCREEN and self._covered():
            top = next(s for s in reversed(self.screen_stack) if not isinstance(s, CommandPalette))
            return f"close {self._screen_name(top)} first"
        if self._in_this_mode(action):
            return self._blocker(action) or "not available right now"
        if self.replay is not None:
            return "a saved trace is read-only: this key acts in a live session"
        return "this key steps through a saved trace"

    def _refuse(self, action: str) -> None:
        self.notify(self.refusal(action), title="Not now", severity="warning", timeout=3)

    def _blocker(self, action: str) -> str | None:
        """Why an action of this mode cannot act now (None: it can). The footer dims the keys
        that have a reason, and pressing one shows it."""
        if action in REPLAY_ONLY:
            assert self.replay is not None
            if action == "frame_forward":
                last = self.replay.position == len(self.replay.frames) - 1
                return "this is the last frame" if last else None
            return "this is the first frame" if self.replay.position == 0 else None
        if action == "toggle_run" and self.auto_running:
            return None  # pausing is always possible
        if action in MUTATING or action == "export":  # these read or change the session
            if self._exporting:
                return "an export is still being written"
            if self._computing is not None:
                return self._computing.describe()
        request = self.view.request(self.selected_id)
        if action in ("step", "toggle_run") and not self._session.can_step():
            return "nothing to step: every request has finished and no scenario event is due"
        if action == "undo" and not self._session.can_undo():
            return self._why_no_undo()
        if action == "filter_log":
            selected = self.selected_id is not None or self.filter_log
            return None if selected else "select a request first"
        if action in ("cancel_request", "rollback", "rollback_many"):
            if request is None:
                return "select a request first"
            if action == "cancel_request":
                return (
                    None if request.get("can_cancel") else f"{request['id']} has already finished"
                )
            if request.get("can_rollback"):
                return None
            ended = {"cancelled": "was cancelled", "error": "failed"}.get(request["finish_reason"])
            if ended:
                return f"{request['id']} {ended}: it cannot be rolled back"
            return f"{request['id']} has no generated tokens to roll back"
        return None

    def _why_no_undo(self) -> str:
        if self.engine.tick == 0:
            return "nothing to undo"
        depth = self.engine.config.undo_depth
        if depth == 0:
            return "undo is off: this session keeps no rounds to undo (undo depth 0)"
        return (
            f"no older round to undo: undo keeps the last {plural(depth, 'round')} at most, "
            "fewer when the pool needs their blocks"
        )

    def _refresh_bindings_if_changed(self) -> None:
        # The footer recomposes on every refresh_bindings(); skip it when nothing changed.
        states = tuple(self.check_action(action, ()) for action in sorted(DEBUGGER_ACTIONS))
        if states != self._binding_states:
            self._binding_states = states
            self.refresh_bindings()

    def action_available(self, action: str) -> bool:
        return bool(self.check_action(action, ()))

    # -- live actions (the only code that mutates the session) --------------------------------

    def _mutate(self, operation: Callable[[], object]) -> bool:
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

    def _report_failure(self, error: BaseException) -> None:
        if isinstance(error, ENGINE_ERRORS):
            self.notify(error_message(error), title="Not done", severity="error")
            return
        self.notify(
            f"{type(error).__name__}: {error_message(error)}",
            title="Engine failure (state restored)",
            severity="error",
            timeout=15,
        )

    def action_step(self) -> None:
        self._step()

    def _step(self) -> bool:
        """Run one round: here, or on its own thread when it is long (then True means
        started, and `on_round_computed` reports how it ended)."""
        positions = self.engine.pending_positions()
        if positions < self.BACKGROUND_POSITIONS:
            return self._mutate(self._session.step)
        self._computing = ComputingRound(self.engine.tick + 1, positions)
        compute_round(self._session, self._computing, self)
        self.refresh_view()
        return True

    def on_round_computed(self, message: RoundComputed) -> None:
        self._computing = None
        if self.closing:
            return
        if message.error is not None:
            self._report_failure(message.error)
            self._stop_auto_run()
        self.refresh_view()

    def action_undo(self) -> None:
        # The engine rewinds to before the last round: what was done since goes too, so say it.
        discarded = self._session.operations_undo_discards()
        undone_round = self.engine.tick
        if not self._mutate(self._session.undo):
            return
        # Auto-run would run the undone round again at its next tick: going back pauses it.
        paused = self.auto_running
        if paused:
            self._stop_auto_run()
            self.refresh_view()  # the header stops saying so
        said = [f"Undid round {undone_round}"] if discarded or paused else []
        if discarded:
            what = ", ".join(self._describe_operation(op) for op in discarded)
            said.append(f" and what was done after it: {what}")
        if paused:
            said.append(". Auto-run paused: press r to run on")
        if said:
            self.notify("".join(said), title="Undone", timeout=8)

    def _describe_operation(self, operation: Mapping[str, Any]) -> str:
        kind = operation.get("op")
        if kind == "submit":
            return f"{operation.get('request_id', 'a new request')}'s submission"
        if kind == "cancel":
            return f"cancelling {operation.get('id')}"
        if kind == "rollback":
            asked = operation.get("tokens", 1)
            removed = operation.get("removed", asked)
            said = f"rolling {operation.get('id')} back {plural(removed, 'token')}"
            return said if removed == asked else f"{said} (asked for {asked})"
        if kind == "clock":
            return f"the clock move of {float(operation.get('seconds', 0)):g}s"
        return str(kind)

    def action_advance_clock(self) -> None:
        self._mutate(self._session.advance_clock)

    def action_cancel_request(self) -> None:
        request_id = self.selected_id
        if request_id is not None:
            self._mutate(lambda: self._session.cancel(request_id))

    def action_rollback(self) -> None:
        request_id = self.selected_id
        if request_id is not None:
            self._mutate(lambda: self._session.rollback(request_id, 1))

    def action_rollback_many(self) -> None:
        request = self.view.request(self.selected_id)
        if request is None:
            return
        request_id = str(request["id"])

        def roll_back(count: int) -> list[int]:
            removed = self._session.rollback(request_id, count)
            self.refresh_view()
            return removed

        self.push_screen(RollbackScreen(request_id, len(request["generated"]), roll_back))

    def action_add_request(self) -> None:
        def submit(prompt: list[int], max_tokens: int, eos_id: int | None) -> str:
            request_id = self._session.submit(prompt, max_tokens, eos_id)
            self.refresh_view()
            return request_id

        def select(request_id: str | None) -> None:
            if request_id is not None:
                self.query_one(RequestTable).select(request_id)

        vocab = self.view.snapshot.get("models", {}).get("target", {}).get("vocab_size", 0)
        self.push_screen(AddRequestScreen(submit, int(vocab)), select)

    def action_toggle_run(self) -> None:
        if self._auto_timer is not None:
            self._stop_auto_run()
        else:
            self._auto_steps = 0
            self._auto_timer = self.set_interval(self.AUTO_RUN_INTERVAL, self._auto_step)
        self.refresh_view()

    def _stop_auto_run(self) -> None:
        if self._auto_timer is not None:
            self._auto_timer.stop()
            self._auto_timer = None
        self._auto_shown_waiting = None

    def _auto_step(self) -> None:
        if self.closing:  # the app is going: its timer must not step or draw any more
            self._stop_auto_run()
            return
        if self._computing is not None:
            return  # the round before is still being computed; the header says so
        waiting = self.auto_waiting  # a dialog is open or an export reads the session
        if waiting != self._auto_shown_waiting:  # the header says so, and when it is over
            self._auto_shown_waiting = waiting
            self.refresh_view()
        if waiting is not None:
            return
        if not self._session.can_step() or self._auto_steps >= self.AUTO_RUN_LIMIT:
            self._stop_auto_run()
            self.refresh_view()
            if self._session.can_step():  # the limit, not the end: say so, or it looks done
                self.notify(
                    f"Auto-run paused after {self.AUTO_RUN_LIMIT} rounds, its limit per run; "
                    "press r to run on",
                    title="Auto-run paused",
                    timeout=10,
                )
            return
        self._auto_steps += 1
        if not self._step():
            self._stop_auto_run()
            self.refresh_view()

    # -- replay actions -----------------------------------------------------------------------

    def action_frame_forward(self) -> None:
        if self.replay is not None and self.replay.forward():
            self.refresh_view()

    def action_frame_back(self) -> None:
        if self.replay is not None and self.replay.back():
            self.refresh_view()

    # -- views and files ----------------------------------------------------------------------

    def action_filter_log(self) -> None:
        self.filter_log = not self.filter_log
        self._show_selection()
        self._refresh_bindings_if_changed()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_help()), self._after_help)

    def _after_help(self, result: str | None) -> None:
        if result == "guide":  # `g` in the help
            self.action_guide()

    def action_guide(self) -> None:
        # Imported on first use: the Markdown viewer would add ~65 ms to every start.
        from .screens.guide import GuideScreen

        if not isinstance(self.screen, GuideScreen):  # help opened from the guide: back to it
            self.push_screen(GuideScreen())

    def action_command_palette(self) -> None:
        if self.use_command_palette and not CommandPalette.is_open(self):  # type: ignore[arg-type]
            self._palette_opened += 1
            self.push_screen(ClosingOncePalette(id="--command-palette"))

    async def action_quit(self) -> None:
        if self._exporting:  # `e` then `q` at once: the files first, then quit
            self._quit_after_export = True
            self.notify("Quitting once the export is written", title="Export")
            return
        await super().action_quit()

    def action_export(self) -> None:
        self._exporting = True
        self._refresh_bindings_if_changed()
        self._export(self.export_dir)

    @work(thread=True, exclusive=True, exit_on_error=False, name="export", group="export")
    def _export(self, directory: Path) -> list[Path]:
        # A trace being viewed exports the frame on screen, not the end of the trace.
        replay = self.replay
        session = self._session if replay is None else replay.session_at(replay.position)
        return export_all(session, directory)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "export" or not event.worker.is_finished:
            return
        self._exporting = False
        if self.closing:
            return
        if event.state == WorkerState.SUCCESS:
            paths = event.worker.result or []
            listing = "\n".join(str(p) for p in paths)
            wrote = f"Wrote {len(paths)} file(s)"
            severity: SeverityLevel = "information"
            if self.replay is not None and self.replay.divergence:
                # The files come from re-execution, which is not what the trace recorded.
                wrote += (
                    " of this build's re-execution, which differs from the recorded trace "
                    "(see the header)"
                )
                severity = "warning"
            self.notify(f"{wrote}:\n{listing}", title="Exported", severity=severity)
        elif event.state == WorkerState.ERROR:
            error = event.worker.error
            reason = error_message(error) if error is not None else "unknown error"
            self.notify(f"Export failed: {reason}", title="Export", severity="error")
        self._refresh_bindings_if_changed()
        quit_now = self._quit_after_export and event.state == WorkerState.SUCCESS
        self._quit_after_export = False  # a failed export keeps the app open, to say so
        if quit_now:
            self.exit()

    def action_save_screen(self) -> None:
        snapshot = self.view.snapshot
        scenario = snapshot.get("session", {}).get("scenario", "session")
        stem = free_stem(
            self.export_dir, f"{safe_name(scenario)}-t{self.view.tick:04d}-screen", [".svg"]
        )
        target = self.export_dir / f"{stem}.svg"
        try:
            svg = self.export_screenshot(
                title=f"deepinfer-tui · {scenario} · tick {self.view.tick}"
            )
            make_export_folder(self.export_dir)
            write_atomically({target: svg})
        except OSError as error:
            message = f"Screenshot failed: {error_message(error)}"
            self.notify(message, title="Screenshot", severity="error")
            return
        self.notify(f"Screenshot saved: {target}", title="Screenshot")

    # -- help and command palette -------------------------------------------------------------

    def _bindings_of_this_mode(self) -> list[Binding]:
        """The described bindings, without the other mode's (live vs replay)."""
        return [
            binding
            for binding in self.BINDINGS
            if isinstance(binding, Binding)
            and binding.description
            and self._in_this_mode(binding.action)
        ]

    def key_help(self) -> list[KeyHelp]:
        rows = [
            KeyHelp(_key_label(binding.key), binding.description, binding.tooltip)
            for binding in self._bindings_of_this_mode()
        ]
        rows.append(KeyHelp("ctrl+p", "palette", "Every action, searchable"))
        rows.append(KeyHelp("↑ ↓", "select", "Move the request cursor (tab moves between panes)"))
        return rows

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # The debugger's own palette entries include Quit and a screenshot into the export
        # folder, with their keys: Textual's would list them a second time (and its screenshot
        # saves elsewhere).
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit", "Screenshot"):
                yield command

    def palette_actions(self) -> list[PaletteAction]:
        return [
            PaletteAction(
                binding.action,
                binding.tooltip or binding.description,
                _key_label(binding.key),
                binding.description,
            )
            for binding in self._bindings_of_this_mode()
        ]

    def run_palette_action(self, action: str) -> None:
        # One command per opening: Enter pressed twice before the palette closed selects twice.
        if self._palette_ran == self._palette_opened:
            return
        self._palette_ran = self._palette_opened
        # Deferred: the palette is still closing when its command is called.
        self.call_later(self._run_palette_action, action)

    async def _run_palette_action(self, action: str) -> None:
        if self.closing:
            return
        if not await self.run_action(action):
            self._refuse(action)
