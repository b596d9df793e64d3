"""A round too long for the event loop, computed on a thread of its own.

A long prefill (64 prompts of 4096 positions took 13 s) froze the screen, `q` included. Such
a round runs `Session.step()` on a daemon thread that posts `RoundComputed` back to the app;
until then the app reads only the view it already has and refuses every key that would read
or change the session. Quitting does not wait for the round: the session ends with the app.
"""

from __future__ import annotations

import threading
from contextlib import suppress

from textual.message import Message
from textual.message_pump import MessagePump

from .session import Session
from .widgets.view import ComputingRound


class RoundComputed(Message):
    """The background round has ended: `error` is what `Session.step()` raised, if anything."""

    def __init__(self, error: BaseException | None) -> None:
        super().__init__()
        self.error = error


def compute_round(session: Session, computing: ComputingRound, report_to: MessagePump) -> None:
    """Run one session round on a daemon thread; `report_to` gets `RoundComputed` after."""

    def run() -> None:
        error: BaseException | None = None
        try:
            session.step()
        except BaseException as failure:  # the engine restored itself; the app reports it
            error = failure  # (an exit or interrupt too: the app must hear the round ended)
        with suppress(RuntimeError):  # the app closed meanwhile (its event loop is gone)
            report_to.post_message(RoundComputed(error))

    threading.Thread(target=run, name=f"round {computing.round}", daemon=True).start()
