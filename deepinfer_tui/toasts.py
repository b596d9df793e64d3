"""The notifications on screen, so a repeated one replaces its twin instead of stacking: a
blocked key pressed 30 times showed 30 toasts over half the screen.

Textual has no public way to withdraw one notification: on a repeat the app clears them all
and posts the others again, in their order and with the time they had left, the repeat last
with its full time. Posted copies still on their way when another repeat comes are dropped on
arrival (their newer copies follow), so no burst of repeats ever shows a toast twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.notifications import Notification, Notify, SeverityLevel


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


class Notices:
    """The app's notifications: plain text, and a repeat replaces its twin (a mixin of
    `DebuggerApp`, which keeps a `Toasts` as `_toasts`)."""

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
        """A notification already on screen is replaced, not stacked (see `toasts`). Runs
        before App adds the new one."""
        arrival = self._toasts.arrived(event.notification)
        if arrival.show:
            return
        event.prevent_default()
        if arrival.reshow:
            self.clear_notifications()
            for notification in arrival.reshow:
                self.post_message(Notify(notification))

    def action_help_quit(self) -> None:
        """ctrl+c: say how to quit in plain words (Textual's own line is markup, and this
        app's notices are plain text)."""
        keys = [
            k for k, b in self.active_bindings.items() if b.binding.action in ("quit", "app.quit")
        ]
        self.notify(
            f"Press {' or '.join(keys) or 'q'} to quit the app", title="Do you want to quit?"
        )
