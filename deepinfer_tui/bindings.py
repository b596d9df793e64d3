"""The debugger's keys as data: each action's id, keys, footer word and what it does.

The app builds its Textual bindings from `KEYS`; the help screen, the command palette, the
footer's narrow-terminal rules and the availability policy read the same table.
No Textual import: the availability policy and its tests use it too.
"""

from __future__ import annotations

from dataclasses import dataclass

VIEWS = "views"  # the number keys' footer group
# Auto-run's waits between rounds (seconds), slowest first: `+` and `-` step through them.
AUTO_RUN_WAITS = (2.0, 1.0, 0.5, 0.25, 0.1, 0.05, 0.02)


@dataclass(frozen=True)
class Key:
    action: str  # also the binding's id
    keys: str  # comma-separated Textual key names
    description: str  # the footer's word
    tooltip: str  # what it does, in the help and the palette
    show: bool = True  # in the footer
    priority: bool = False  # acts over dialogs too
    group: str | None = None  # keys the footer shows side by side under one word

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
    Key("first_frame", "home", "first", "Replay: the first frame", show=False),
    Key("last_frame", "end", "last", "Replay: the last frame", show=False),
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
    Key("show_tree", "1", "tree", "View area: the selected request's draft tree", group=VIEWS),
    Key(
        "show_cache",
        "2",
        "cache",
        "View area: the prefix cache of the policy in use (entries, free queue or radix tree)",
        group=VIEWS,
    ),
    Key(
        "show_timeline",
        "3",
        "timeline",
        "View area: every request's state in every round (queued, prefilling, decoding, ...); "
        "click a round's column to go to that round",
        group=VIEWS,
    ),
    Key(
        "show_round",
        "4",
        "round",
        "View area: the last round's token budget, split by request and kind",
        group=VIEWS,
    ),
    Key(
        "show_metrics",
        "5",
        "metrics",
        "View area: TTFT, inter-token latency, queue time per request; acceptance, prefix "
        "hits, KV usage",
        group=VIEWS,
    ),
    Key(
        "show_diff",
        "6",
        "diff",
        "View area: what the last operation changed: blocks, refcounts, cache entries, tokens "
        "committed and rolled back, request states",
        group=VIEWS,
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
        "Requests: sort by prompt, tokens, blocks, priority or state (o again: the next, then "
        "as submitted)",
        show=False,
    ),
    Key(
        "filter_state",
        "s",
        "state",
        "Requests: only running, queued or finished ones (s again: the next, then all)",
        show=False,
    ),
    Key(
        "run_faster",
        "plus,equals_sign",
        "faster",
        "Auto-run: a shorter wait between rounds (steps of "
        + ", ".join(f"{s:g}" for s in reversed(AUTO_RUN_WAITS))
        + " s)",
        show=False,
    ),
    Key("run_slower", "minus", "slower", "Auto-run: a longer wait between rounds", show=False),
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
    ("home end", "first/last", "The first / last request (a saved trace: its first / last frame)"),
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
REPLAY_ONLY = frozenset({"frame_forward", "frame_back", "first_frame", "last_frame"})
# Live keys that leave the session as it is (auto-run's speed): off in replay mode only.
LIVE_ONLY = frozenset({"run_faster", "run_slower"})
DEBUGGER_ACTIONS = (
    MUTATING
    | REPLAY_ONLY
    | LIVE_ONLY
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
# Keys the footer drops below 150 columns, more on narrow terminals and more on tiny ones, so
# the view keys, help and quit stay in view (every key still works, and help and the palette
# list them all; the guide is also `g` in the help).
WIDE_ONLY_ACTIONS = frozenset({"filter_log", "guide"})
MINOR_ACTIONS = frozenset({"export", "advance_clock"})
SECONDARY_ACTIONS = frozenset({"toggle_run", "rollback", "add_request"})
# The footer's CSS class for each set (app.tcss hides them by the screen's width).
FOOTER_TIERS = {
    "-wide-only": WIDE_ONLY_ACTIONS,
    "-minor": MINOR_ACTIONS,
    "-secondary": SECONDARY_ACTIONS,
}


def key_label(keys: str) -> str:
    """Textual key names as a person reads them: `question_mark,f1` -> `? f1`."""
    names = {
        "question_mark": "?",
        "backspace": "⌫",
        "plus": "+",
        "equals_sign": "=",
        "minus": "-",
    }
    return " ".join(names.get(k.strip(), k.strip()) for k in keys.split(","))


def debugger_actions_of(key: str) -> list[str]:
    """The debugger actions bound to `key`, in table order (a key can serve both modes)."""
    return [k.action for k in KEYS if key in k.key_names and k.action in DEBUGGER_ACTIONS]
