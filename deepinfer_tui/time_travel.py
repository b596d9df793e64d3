"""Moving through time. Go to round N: live, back through undo or forward by stepping; in a
replay, that frame. Run until: step to the next round that preempts, evicts, rejects a draft
or finishes a request.

`plan` is the pure part (what it takes, or why it cannot); `go_to_round` does it through the
session's public operations, so every round it passes is an ordinary undo or step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .describe import plural

if TYPE_CHECKING:
    from .app import DebuggerApp

FORWARD_LIMIT = 500  # rounds one go-to may step, as auto-run's limit per run


def plan(tick: int, target: int, undo_available: int, can_step: bool) -> int:
    """Rounds to move (negative: undo that many); ValueError says why it cannot."""
    if target < tick:
        back = tick - target
        if back > undo_available:
            kept = plural(undo_available, "round")
            raise ValueError(
                f"round {target} is out of reach: undo keeps {kept} here (back to round "
                f"{tick - undo_available})"
            )
        return -back
    if target > tick and not can_step:
        raise ValueError(f"round {target} is out of reach: every request has finished")
    if target - tick > FORWARD_LIMIT:
        raise ValueError(f"round {target} is {target - tick} rounds ahead: at most {FORWARD_LIMIT}")
    return target - tick


def frame_of_round(snapshots: Sequence[Mapping[str, Any]], target: int) -> int:
    """The first replay frame at round `target` (right after that round ran)."""
    for index, snapshot in enumerate(snapshots):
        if int(snapshot.get("tick", 0)) == target:
            return index
    last = max((int(snapshot.get("tick", 0)) for snapshot in snapshots), default=0)
    raise ValueError(f"round {target} is not in this trace: it has rounds 0 to {last}")


def reach(app: DebuggerApp) -> str:
    """What go-to can reach from here, for the dialog."""
    if app.replay is not None:
        last = max(int(frame.snapshot.get("tick", 0)) for frame in app.replay.frames)
        return f"this trace has rounds 0 to {last}"
    back = app.engine.tick - app.engine.undo_available
    return f"undo reaches back to round {back}, stepping forward up to {FORWARD_LIMIT} rounds"


def go_to_round(app: DebuggerApp, target: int) -> None:
    """Move the debugger to round `target`, or notify why not (nothing changes then)."""
    try:
        if app.replay is not None:
            replay = app.replay
            frame = frame_of_round([f.snapshot for f in replay.frames], target)
            # Through the replay's own stepping (all the app's protocol for it offers).
            while replay.position != frame and (
                replay.forward() if replay.position < frame else replay.back()
            ):
                pass
            app.refresh_view()
            return
        session = app.session
        moves = plan(app.engine.tick, target, app.engine.undo_available, session.can_step())
    except ValueError as error:
        app.notify(str(error), title="Not done", severity="warning")
        return
    if app.auto_running:
        app.action_toggle_run()  # it would run on from the round it left
    for _ in range(abs(moves)):
        done = app.step_once() if moves > 0 else app._mutate(session.undo)
        if not done or app.computing is not None or (moves > 0 and not session.can_step()):
            break  # a failure (notified), a long round on its own thread, or the end
    if moves < 0 and app.engine.tick == target:
        undone = plural(-moves, "round")
        app.notify(f"undid {undone} and what was done in them", title="Go to round")
    if app.engine.tick != target and app.computing is None:
        app.notify(f"stopped at round {app.engine.tick}", title="Go to round")
    elif app.computing is not None:
        app.notify(
            f"{app.computing.describe()}; go to round {target} again when it is done",
            title="Go to round",
        )


# What "run until" stops at: the first round with one of these (a commit: a rejected draft).
STOPS = {
    "preempt": "{request} was preempted",
    "evict": "the prefix cache evicted {positions} positions",
    "block_evicted": "the prefix cache evicted block {block}",
    "finished": "{request} finished ({finish_reason})",
}


def stop_reason(events: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a round's events stop "run until" (None: they do not), in words."""
    for event in events:
        kind = event.get("kind")
        if kind == "commit" and event.get("outcome") == "replacement":
            return f"{event['request_id']} had a draft rejected"
        if kind in STOPS:
            fields = {"request": event.get("request_id"), **event}
            return STOPS[kind].format_map(_Missing(fields))
    return None


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def run_until(app: DebuggerApp) -> None:
    """Step until a round preempts, evicts, rejects a draft or finishes a request (at most
    FORWARD_LIMIT rounds), and say which and why."""
    if app.auto_running:
        app.action_toggle_run()
    for _ in range(FORWARD_LIMIT):
        seen = len(app.engine.trace)
        if not app.step_once() or app.computing is not None:
            return  # a failure (notified), or a long round now on its own thread
        reason = stop_reason(app.engine.trace[seen:])
        if reason is not None:
            app.notify(f"round {app.engine.tick}: {reason}", title="Run until")
            return
        if not app.session.can_step():
            app.notify(f"round {app.engine.tick}: nothing more to step", title="Run until")
            return
    app.notify(f"nothing notable in {FORWARD_LIMIT} rounds", title="Run until")
