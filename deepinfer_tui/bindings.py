"""The debugger's keys as data: each action's id, keys, footer word and what it does.

The app builds its Textual bindings from `KEYS`; the help screen, the command palette, the
footer's narrow-terminal rules and the availability policy read the same table.
No Textual import: the availability policy and its tests use it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    action: str  # also the binding's id
    keys: str  # comma-separated Textual key names
    description: str  # the footer's word
    tooltip: str  # what it does, in the help and the palette
    show: bool = True  # in the footer
    priority: bool = False  # acts over dialogs too

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(key.strip() for key in self.keys.split(","))

    @property
    def label(self) -> str:
        return key_label(self.keys)


KEYS: tuple[Key, ...] = (
    Key("step", "space,n", "step", "Run one engine round"),
    Key("frame_forward", "space,n", "next", "Replay: next frame"),
    Key("frame_back", "u,backspace", "back", "Replay: previous frame"),
    Key("toggle_run", "r", "run", "Run / pause auto-stepping"),
    Key("cancel_request", "c", "cancel", "Cancel the selected request"),
    Key("rollback", "b", "rollback", "Roll the selected request back 1 token"),
    Key(
        "rollback_many",
        "B",
        "rollback N",
        "Roll the selected request back N tokens (asks N)",
        show=False,
    ),
    Key("undo", "u", "undo", "Undo the last round and anything done since it"),
    Key("add_request", "a", "add", "Add a request (asks tokens)"),
    Key("advance_clock", "t", "clock", "Advance the clock to the next cache expiry"),
    Key("filter_log", "f", "filter", "Log: only the selected request / all"),
    Key("show_tree", "1", "tree", "View area: the selected request's draft tree", show=False),
    Key(
        "show_cache",
        "2",
        "cache",
        "View area: the prefix cache of the policy in use (entries, free queue or radix tree)",
        show=False,
    ),
    Key(
        "show_timeline",
        "3",
        "timeline",
        "View area: every request's state in every round (queued, prefilling, decoding, ...)",
        show=False,
    ),
    Key(
        "show_round",
        "4",
        "round",
        "View area: the last round's token budget, split by request and kind",
        show=False,
    ),
    Key(
        "show_metrics",
        "5",
        "metrics",
        "View area: TTFT, inter-token latency, queue time per request; acceptance, prefix "
        "hits, KV usage",
        show=False,
    ),
    Key(
        "goto_round",
        "G",
        "go to",
        "Go to round N (asks N): live, back through undo or forward by stepping; a saved "
        "trace, that round's frame",
        show=False,
    ),
    Key(
        "run_until",
        "R",
        "run until",
        "Run until the next preemption, eviction, rejected draft or finished request",
        show=False,
    ),
    Key(
        "filter_kind",
        "k",
        "kind",
        "Log: only one kind of event (commit, restore, publish, evict, ...; k again: the "
        "next, then all)",
        show=False,
    ),
    Key(
        "order_requests",
        "o",
        "order",
        "Requests: sort by prompt, tokens, blocks or state (o again: the next, then as submitted)",
        show=False,
    ),
    Key(
        "filter_state",
        "s",
        "state",
        "Requests: only running, queued or finished ones (s again: the next, then all)",
        show=False,
    ),
    Key("export", "e", "export", "Export a trace snapshot (files)"),
    # Priority: dialogs (modal screens) keep the app's other keys from them.
    Key(
        "save_screen",
        "ctrl+s",
        "screenshot",
        "Save this screen as an SVG",
        show=False,
        priority=True,
    ),
    Key("guide", "g", "guide", "Open the guide chapters"),
    Key("help", "question_mark,f1", "help", "Keys, panes and legend"),
    Key("quit", "q", "quit", "Quit (asks once if what you did by hand is not exported)"),
)
# Help-only rows: keys Textual itself handles.
EXTRA_HELP: tuple[tuple[str, str, str], ...] = (
    ("ctrl+p", "palette", "Every action, searchable"),
    ("↑ ↓", "select", "Move the request cursor (tab moves between panes)"),
)

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
        "run_until",
    }
)
REPLAY_ONLY = frozenset({"frame_forward", "frame_back"})
DEBUGGER_ACTIONS = (
    MUTATING
    | REPLAY_ONLY
    | {
        "filter_log",
        "filter_kind",
        "goto_round",
        "export",
        "save_screen",
        "guide",
    }
)
# Actions that also act over another screen: a screenshot of a dialog or the guide is useful.
OVER_ANY_SCREEN = frozenset({"save_screen"})
# Keys the footer drops on narrow terminals, and more on tiny ones, so help and quit stay in
# view (every key still works, and help and the palette list them all).
MINOR_ACTIONS = frozenset({"filter_log", "export", "guide"})
SECONDARY_ACTIONS = frozenset({"toggle_run", "rollback", "add_request", "advance_clock"})


def key_label(keys: str) -> str:
    """Textual key names as a person reads them: `question_mark,f1` -> `? f1`."""
    names = {"question_mark": "?", "backspace": "⌫"}
    return " ".join(names.get(k.strip(), k.strip()) for k in keys.split(","))


def debugger_actions_of(key: str) -> list[str]:
    """The debugger actions bound to `key`, in table order (a key can serve both modes)."""
    return [k.action for k in KEYS if key in k.key_names and k.action in DEBUGGER_ACTIONS]
