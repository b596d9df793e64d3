"""The notifications on screen, so a repeated one replaces its twin instead of stacking: a
blocked key pressed 30 times showed 30 toasts over half the screen.

Textual has no public way to withdraw one notification: on a repeat the app clears them all
and posts the others again, in their order and with the time they had left, the repeat last
with its full time. Posted copies still on their way when another repeat comes are dropped on
arrival (their newer copies follow), so no burst of repeats ever shows a toast twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.notifications import Notification


def _same(a: Notification, b: Notification) -> bool:
    return (a.message, a.title, a.severity, a.markup) == (b.message, b.title, b.severity, b.markup)


@dataclass(frozen=True)
class Arrival:
    """What to do with an arriving notification."""

    show: bool  # let Textual add it
    reshow: tuple[Notification, ...] = ()  # if not shown: clear all, then post these, in order


class Toasts:
    def __init__(self) -> None:
        self._shown: list[Notification] = []  # on screen or posted again, in screen order
        self._posted: set[str] = set()  # identities of copies on their way
        self._dropped: set[str] = set()  # identities of copies to drop when they arrive

    def arrived(self, notification: Notification) -> Arrival:
        identity = notification.identity
        if identity in self._dropped:
            self._dropped.discard(identity)
            return Arrival(show=False)
        if identity in self._posted:
            self._posted.discard(identity)
            return Arrival(show=True)  # already in `_shown`
        self._shown = [n for n in self._shown if not n.has_expired]
        if not any(_same(n, notification) for n in self._shown):
            self._shown.append(notification)
            return Arrival(show=True)
        # A repeat: every copy still on its way is superseded by the one posted now.
        self._dropped |= self._posted
        self._posted = set()
        kept = [_copy(n, n.time_left) for n in self._shown if not _same(n, notification)]
        self._shown = [*kept, _copy(notification, notification.timeout)]
        self._posted = {n.identity for n in self._shown}
        return Arrival(show=False, reshow=tuple(self._shown))


def _copy(n: Notification, timeout: float) -> Notification:
    # A new identity: Textual keys notifications by it.
    return Notification(n.message, n.title, n.severity, max(timeout, 0.0), markup=n.markup)
