"""Files from the app: `e` exports a trace snapshot on a worker thread (the screen stays
live while it writes; keys that change the session wait for it, and `q` quits after it);
ctrl+s saves the screen as an SVG. `ExportActions` is a mixin of `DebuggerApp`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from textual.dom import DOMNode
from textual.notifications import SeverityLevel
from textual.widgets._toast import ToastRack
from textual.worker import Worker, WorkerState

from .describe import error_message, plural
from .diff_view import FrameBefore
from .export import export_all, free_stem, make_export_folder, safe_name, write_atomically
from .session import Session

if TYPE_CHECKING:
    from .app import DebuggerApp

EXPORT_WORKER = "export"


def start_export(
    host: DOMNode,
    session: Callable[[], Session],
    directory: Path,
    before: FrameBefore | None = None,
) -> Worker[list[Path]]:
    """Write every export of `session()` into `directory` on a thread owned by `host` (Textual
    cancels it with its owner; one export at a time). `session` is called on the thread: a
    replay's frame is re-executed there, not on the event loop."""

    def export() -> list[Path]:
        return export_all(session(), directory, before=before)

    return host.run_worker(
        export,
        name=EXPORT_WORKER,
        group=EXPORT_WORKER,
        exit_on_error=False,
        exclusive=True,
        thread=True,
    )


def is_export(worker: Worker[object]) -> bool:
    return worker.name == EXPORT_WORKER


Notice = tuple[str, Literal["Exported", "Export"], SeverityLevel]


def export_notice(worker: Worker[object], diverged: bool) -> Notice | None:
    """(message, title, severity) for a finished export; None while it runs or if cancelled.
    `diverged`: the files come from a replay's re-execution, which differs from its trace."""
    if worker.state == WorkerState.SUCCESS:
        result = worker.result
        paths = [Path(p) for p in result] if isinstance(result, list) else []
        wrote, listing = f"Wrote {plural(len(paths), 'file')}", file_listing(paths)
        if diverged:
            wrote += (
                " of this build's re-execution, which differs from the recorded trace "
                "(see the header)"
            )
            return f"{wrote}{listing}", "Exported", "warning"
        return f"{wrote}{listing}", "Exported", "information"
    if worker.state == WorkerState.ERROR:
        error = worker.error
        reason = error_message(error) if error is not None else "unknown error"
        return f"Export failed: {reason}", "Export", "error"
    return None


def file_listing(paths: list[Path]) -> str:
    """What follows "Wrote 5 files", short enough for a toast at 80x24: their folder once,
    then their shared name and each ending (` in out/:` `default-t0001.{svg, html}`), else
    one path a line."""
    folders = {p.parent for p in paths}
    names = [p.name.split(".", 1) for p in paths]
    if len(paths) < 2 or len(folders) != 1 or any(len(n) < 2 or n[0] != names[0][0] for n in names):
        return ":\n" + "\n".join(str(p) for p in paths)
    endings = ", ".join(ending for _, ending in names)  # spaced: a toast wraps between them
    return f" in {folders.pop()}{os.sep}:\n{names[0][0]}.{{{endings}}}"


def hand_made(operations: list[dict[str, object]]) -> list[str]:
    """What was done by hand among these operations (all but steps), by kind, in order."""
    names = {
        "cancel": "a cancel",
        "rollback": "a rollback",
        "submit": "an added request",
        "clock": "a clock move",
        "undo": "an undo",
    }
    kinds = [names.get(str(op.get("op")), str(op.get("op"))) for op in operations]
    return list(dict.fromkeys(kind for kind, op in zip(kinds, operations) if op["op"] != "step"))


class ExportActions:
    async def action_quit(self: DebuggerApp) -> None:
        if self._exporting:  # `e` then `q` at once: the files first, then quit
            self._quit_after_export = True
            self.notify("Quitting once the export is written", title="Export")
            return
        unsaved = self.unsaved_hand_work()
        if unsaved and not self._quit_asked:
            # Asked once: a second q quits.
            self._quit_asked = True
            self.notify(
                f"This session has {' and '.join(unsaved)} made by hand and not exported: "
                "press q again to quit anyway, or e to export first.",
                title="Quit?",
                severity="warning",
                timeout=8,
            )
            return
        await super().action_quit()

    def unsaved_hand_work(self: DebuggerApp) -> list[str]:
        """What the user did by hand since the last written export began (nothing in a
        replay, which is read-only)."""
        if self.replay is not None:
            return []
        return hand_made(self._session.operations[self._exported_operations :])

    def action_export(self: DebuggerApp) -> None:
        self._exporting = True
        self._export_began_at = len(self._session.operations)
        self.refresh_view()  # the header says an export is being written until it is
        # A trace being viewed exports the frame on screen, not the end of the trace.
        replay = self.replay
        # The frame before the one exported, as the diff pane (key 6) compares them.
        previous = self.view.previous
        before = None if previous is None else FrameBefore(previous, self.view.since)
        if replay is None:
            start_export(self, lambda: self._session, self.export_dir, before)
        else:
            position = replay.position
            start_export(self, lambda: replay.session_at(position), self.export_dir, before)

    def on_worker_state_changed(self: DebuggerApp, event: Worker.StateChanged) -> None:
        if not is_export(event.worker) or not event.worker.is_finished:
            return
        self._exporting = False
        if self.closing:
            return
        self.refresh_view()  # the header's "writing the export" goes
        diverged = self.replay is not None and bool(self.replay.divergence)
        notice = export_notice(event.worker, diverged)
        if event.worker.state == WorkerState.SUCCESS:
            self._exported_operations = self._export_began_at
        if notice is not None:
            message, title, severity = notice
            self.notify(message, title=title, severity=severity)
        self._refresh_bindings_if_changed()
        quit_now = self._quit_after_export and notice is not None and title == "Exported"
        self._quit_after_export = False  # a failed export keeps the app open, to say so
        if quit_now:
            self.exit()

    def action_save_screen(self: DebuggerApp) -> None:
        # The toasts (an earlier "Screenshot saved" among them) are not part of the screen
        # being debugged: hidden while the screen is captured, after the next repaint.
        racks = list(self.screen.query(ToastRack))
        for rack in racks:
            rack.display = False
        self.screen.call_after_refresh(self._save_screen, racks)

    def _save_screen(self: DebuggerApp, racks: list[ToastRack]) -> None:
        try:
            self._write_screenshot()
        finally:
            for rack in racks:
                rack.display = True

    def _write_screenshot(self: DebuggerApp) -> None:
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
        # Its folder, then its name on a line of its own: a toast breaks a long line mid-word.
        self.notify(
            f"Screenshot saved in {target.parent}{os.sep}:\n{target.name}", title="Screenshot"
        )
