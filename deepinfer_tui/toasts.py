"""The notifications on screen, so a repeated one replaces its twin instead of stacking: a
blocked key pressed 30 times showed 30 toasts over half the screen.

Textual has no public way to withdraw one notification; the app clears them all and shows
the others again, in their order and with the time they had left (`reshown`).
"""

from __future__ import annotations

from textual.notifications import Notification


def _same(a: Notification, b: Notification) -> bool:
    return (a.message, a.title, a.severity, a.markup) == (b.message, b.title, b.severity, b.markup)


class Toasts:
    def __init__(self) -> None:
        self._shown: list[Notification] = []

    def add(self, notification: Notification) -> None:
        self._shown = [n for n in self._shown if not n.has_expired]
        self._shown.append(notification)

    def repeats(self, notification: Notification) -> bool:
        return any(_same(n, notification) and not n.has_expired for n in self._shown)

    def reshown(self, newest: Notification) -> list[Notification]:
        """Every notification to show again after clearing them all, `newest` last and its
        twin gone; forgets them all (they come back through `add`)."""
        kept = [n for n in self._shown if not _same(n, newest) and n.time_left > 0]
        self._shown = []
        return [_again(n) for n in kept] + [_again(newest)]


def _again(n: Notification) -> Notification:
    # A new identity, and the time the toast had left.
    timeout = min(n.timeout, max(n.time_left, 0.0))
    return Notification(n.message, n.title, n.severity, timeout, markup=n.markup)
