"""The debugger app: wires the panes to a Session (or a read-only replay).

Flow: an action mutates the session (`live_actions`) -> `refresh_view()` builds one immutable
`View` (snapshot + log) -> every pane renders from it. Widgets never touch the session. Which
key can act now is `availability`'s policy over `bindings`; auto-run, the export worker, the
collector tuning and the toasts are modules of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.command import CommandPalette
from textual.containers import Grid
from textual.screen import Screen

from engine import Engine

from . import availability
from .auto_run import AutoRun
from .bindings import DEBUGGER_ACTIONS, EXTRA_HELP, FOOTER_TIERS, KEYS
from .collector import CollectorTuning
from .commands import ClosingOncePalette, DebuggerCommands, PaletteAction
from .diff_view import FrameMemory, frame_before
from .export import DEFAULT_EXPORT_DIR
from .export_worker import ExportActions
from .live_actions import LiveActions
from .replay_source import ReplayLike
from .screen_limits import large_block_warning
from .screens.help import HelpScreen, KeyHelp
from .session import Session
from .toasts import Notices, Toasts
from .view_actions import VIEW_PANES, ViewActions
from .widgets import BlockMap, CommitLog, DraftTree, ReplayPosition, RequestTable, StatusBar
from .widgets.cache_pane import CachePane
from .widgets.diff_pane import DiffPane
from .widgets.footer import KeyFooter, binding_of
from .widgets.metrics_pane import MetricsPane
from .widgets.round_pane import RoundPane
from .widgets.row_table import RowTable
from .widgets.status import DescriptionLine, widest_first_line
from .widgets.timeline_pane import TimelinePane
from .widgets.view import ComputingRound, View, frame_views

TINY_BELOW = 80  # columns
NARROW_BELOW = 110


def _screen_name(screen: Screen[Any]) -> str:
    if isinstance(screen, CommandPalette):
        return "the command palette"
    # By name: the guide's module is imported on first use (see action_guide).
    names = {"GuideScreen": "the guide", "HelpScreen": "the help"}
    return names.get(type(screen).__name__, "the dialog")


class DebuggerApp(LiveActions, ViewActions, ExportActions, Notices, App[None]):
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

    BINDINGS: ClassVar[list[BindingType]] = [binding_of(key) for key in KEYS]

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
        self._header_width = widest_first_line(frame_views(replay.frames)) if replay else 0
        self._table: RequestTable | None = None  # once mounted
        self._shown_id: str | None = None  # the request the detail panes show
        self.filter_log = False
        self.log_kind: str | None = None  # the one event kind the log shows (None: all)
        self.view_area = "tree"  # the view beside the block map (view_actions.VIEW_PANES)
        self._auto_run = AutoRun(self)
        self._auto_wait: float | None = None  # set by the speed keys (None: AUTO_RUN_INTERVAL)
        self._frames = FrameMemory()  # the live frame before the last operation (the diff's)
        self._exporting = False
        self._quit_after_export = False
        self._quit_asked = False  # q asked once about unsaved hand-made history
        # The session's operations when the last export (written) and this one began.
        self._exported_operations = self._export_began_at = 0
        self._computing: ComputingRound | None = None  # a round running on its own thread
        self._palette_opened = self._palette_ran = 0  # palette openings; the last that ran
        self._binding_states: tuple[bool | None, ...] = ()
        self.collector = CollectorTuning()
        self._toasts = Toasts()
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
        return self._auto_run.running

    @property
    def auto_waiting(self) -> str | None:
        """Why auto-run holds its next round now (None: it does not)."""
        if not self._auto_run.running:
            return None
        if self._exporting:
            return "the export"
        if len(self.screen_stack) > 1:
            return _screen_name(self.screen_stack[-1])
        return None

    @property
    def closing(self) -> bool:
        """True once the app has begun to close: its panes are going or gone, so a timer,
        worker or thread that reports now must leave the screen and the session alone."""
        return not self.is_running

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield DescriptionLine(self._session.scenario.description, id="description")
        with Grid(id="panes"):
            yield RequestTable(id="requests")
            yield BlockMap(id="blocks")
            yield DraftTree(id="tree")
            yield TimelinePane(id="timeline")
            yield RoundPane(id="round")
            yield MetricsPane(id="metrics")
            yield CachePane(id="cache")
            yield DiffPane(id="diff")
            yield CommitLog(id="log")
        yield KeyFooter(FOOTER_TIERS, id="footer")

    def on_mount(self) -> None:
        self.collector.raise_threshold()
        table = self._table = self.query_one(RequestTable)
        table.border_title = "Requests"
        table.passes_home_end = self.replay is not None
        self.refresh_view()
        table.focus()
        block_size = int(self.view.snapshot.get("pool", {}).get("block_size", 1))
        warning = large_block_warning(block_size, *self.size)
        if warning:
            self.notify(warning.capitalize(), title="Large blocks", severity="warning", timeout=10)

    def on_unmount(self) -> None:
        self._auto_run.stop()
        self.collector.restore()

    def _pause_gc_until_painted(self) -> None:
        self.collector.pause_until_painted(self.call_after_refresh, self.set_timer)

    # -- the one refresh path -----------------------------------------------------------------

    def _build_view(self) -> View:
        if self._computing is not None:
            # The round's thread is changing the session: show what was there, and why.
            return replace(
                self.view,
                computing=self._computing,
                auto_running=self.auto_running,
                auto_waiting=self.auto_waiting,
                exporting=self._exporting,
            )
        if self.replay is not None:
            frame = self.replay.current
            position = ReplayPosition(
                index=self.replay.position,
                count=len(self.replay.frames),
                label=frame.label,
                divergence=self.replay.divergence,
                header_width=self._header_width,
            )
            before = frame_before(self.replay.frames, self.replay.position)
            return View(
                frame.snapshot, frame.log, replay=position, exporting=self._exporting, **before
            )
        snapshot = self._session.snapshot()
        return View(
            snapshot,
            self._session.log_view(),
            **self._frames.note(snapshot, self._session.operations),
            auto_interval=self.auto_interval,
            auto_running=self.auto_running,
            auto_waiting=self.auto_waiting,
            exporting=self._exporting,
        )

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
        # The view area's pane that is shown (a hidden one renders when it is shown).
        self.query_one(VIEW_PANES[self.view_area]).show(self.view, selected)  # type: ignore[attr-defined]
        log = self.query_one(CommitLog)
        log.show(self.view, selected if self.filter_log else None, self.log_kind)

    def _sync_selection(self) -> None:
        """Show the cursor's request in the detail panes if they still show another."""
        if not self.closing and self.selected_id != self._shown_id:
            self._pause_gc_until_painted()
            self._show_selection()
            self._refresh_bindings_if_changed()

    def on_row_table_highlighted(self, event: RowTable.Highlighted) -> None:
        if event.table.id == "requests":
            self._sync_selection()

    # -- availability (greys out Footer keys; also guards the palette) ------------------------

    def situation(self) -> availability.Situation:
        """What the availability policy reads, now."""
        replay, selected_id = self.replay, self.selected_id
        place = (
            None
            if replay is None
            else availability.ReplayPlace(replay.position, len(replay.frames))
        )
        return availability.Situation(
            session=self._session,
            tick=self.engine.tick,
            undo_depth=self.engine.config.undo_depth,
            replay=place,
            covered_by=self._covering_screen(),
            exporting=self._exporting,
            computing=None if self._computing is None else self._computing.describe(),
            auto_running=self.auto_running,
            selected_id=selected_id,
            selected=self.view.request(selected_id),
            filter_log=self.filter_log,
        )

    def _covering_screen(self) -> str | None:
        """The screen (a dialog, the guide, help) open over the debugger, with or without the
        command palette over it; None when there is none."""
        for screen in reversed(self.screen_stack[1:]):
            if not isinstance(screen, CommandPalette):
                return _screen_name(screen)
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return availability.availability(action, self.situation())

    def refusal(self, action: str) -> str:
        """Why `action` cannot act now: a key and its palette entry give the same reason."""
        return availability.refusal(action, self.situation())

    def _refuse(self, action: str) -> None:
        self.notify(self.refusal(action), title="Not now", severity="warning", timeout=3)

    def on_key(self, event: events.Key) -> None:
        """A debugger key that cannot act now says why (its binding is dimmed or hidden, and
        Textual passes the key on here instead of running it)."""
        situation = self.situation()
        if situation.covered_by is not None:
            return
        refused = availability.refused_action(event.key, situation)
        if refused is not None:
            self._refuse(refused)

    def _refresh_bindings_if_changed(self) -> None:
        # The footer recomposes on every refresh_bindings(); skip it when nothing changed.
        situation = self.situation()
        states = tuple(
            availability.availability(action, situation) for action in sorted(DEBUGGER_ACTIONS)
        )
        if states != self._binding_states:
            self._binding_states = states
            self.refresh_bindings()

    def action_available(self, action: str) -> bool:
        return bool(self.check_action(action, ()))

    # -- views, screens and files -------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_help()), self._after_help)

    def _after_help(self, result: str | None) -> None:
        if result == "guide" and not self.closing:  # `g` in the help
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

    # -- help and command palette -------------------------------------------------------------

    def key_help(self) -> list[KeyHelp]:
        keys = availability.keys_in_this_mode(self.replay is not None)
        rows = [KeyHelp(key.label, key.description, key.tooltip) for key in keys]
        return rows + [KeyHelp(*row) for row in EXTRA_HELP]

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # The debugger's own palette entries include Quit and a screenshot into the export
        # folder, with their keys: Textual's would list them a second time (and its screenshot
        # saves elsewhere).
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit", "Screenshot"):
                yield command

    def palette_actions(self) -> list[PaletteAction]:
        keys = availability.keys_in_this_mode(self.replay is not None)
        return [
            PaletteAction(k.action, k.tooltip or k.description, k.label, k.description)
            for k in keys
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
