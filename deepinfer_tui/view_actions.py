"""Keys that change what the panes show: the view area's view, the log's filters (a request,
a kind of event), the request table's order and state filter; and where in time the debugger
stands (a replay's frames, first to last; go to round N, run until: `time_travel`). A mixin of
`DebuggerApp`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .columns import ORDERS, STATE_FILTERS, following
from .log_filter import next_kind
from .screens.goto_round import GotoRoundScreen
from .time_travel import go_to_round, reach, run_until
from .widgets import RequestTable
from .widgets.timeline_pane import TimelinePane

if TYPE_CHECKING:
    from .app import DebuggerApp


# The panes that take turns in the view area (beside the block map), by the key's view name.
# A new view is one more entry here, a pane in DebuggerApp.compose and a `show_...` key.
VIEW_PANES: dict[str, str] = {
    "tree": "#tree",
    "cache": "#cache",
    "timeline": "#timeline",
    "round": "#round",
    "metrics": "#metrics",
    "diff": "#diff",
}


class ViewActions:
    def show_view(self: DebuggerApp, name: str) -> None:
        """Show one view in the view area (the others are hidden, not closed)."""
        self.view_area = name
        for view, selector in VIEW_PANES.items():
            self.query_one(selector).display = view == name
        self._show_selection()

    def action_show_tree(self: DebuggerApp) -> None:
        self.show_view("tree")

    def action_show_timeline(self: DebuggerApp) -> None:
        self.show_view("timeline")

    def action_show_round(self: DebuggerApp) -> None:
        self.show_view("round")

    def action_show_metrics(self: DebuggerApp) -> None:
        self.show_view("metrics")

    def action_show_diff(self: DebuggerApp) -> None:
        self.show_view("diff")

    # -- a replay's frames --------------------------------------------------------------------

    def action_frame_forward(self: DebuggerApp) -> None:
        if self.replay is not None and self.replay.forward():
            self.refresh_view()

    def action_frame_back(self: DebuggerApp) -> None:
        if self.replay is not None and self.replay.back():
            self.refresh_view()

    def action_first_frame(self: DebuggerApp) -> None:
        if self.replay is not None and self.replay.position != 0:
            self.replay.seek(0)
            self.refresh_view()

    def action_last_frame(self: DebuggerApp) -> None:
        replay = self.replay
        if replay is not None and replay.position != len(replay.frames) - 1:
            replay.seek(len(replay.frames) - 1)
            self.refresh_view()

    def action_goto_round(self: DebuggerApp) -> None:
        def go(target: int | None) -> None:
            if target is not None and not self.closing:
                go_to_round(self, target)

        self.push_screen(GotoRoundScreen(self.view.tick, reach(self)), go)

    def on_timeline_pane_round_chosen(self: DebuggerApp, message: TimelinePane.RoundChosen) -> None:
        if not self.closing:
            go_to_round(self, message.round)  # refused (a notification) where G would be

    def action_run_until(self: DebuggerApp) -> None:
        run_until(self)

    def action_show_cache(self: DebuggerApp) -> None:
        self.show_view("cache")

    def action_filter_log(self: DebuggerApp) -> None:
        self.filter_log = not self.filter_log
        self._show_selection()
        self._refresh_bindings_if_changed()

    def action_filter_kind(self: DebuggerApp) -> None:
        self.log_kind = next_kind(self.log_kind)
        self._show_selection()

    def action_order_requests(self: DebuggerApp) -> None:
        table = self.query_one(RequestTable)
        table.arrange(order=following(tuple(ORDERS), table.order), state=table.state_filter)
        self._sync_selection()

    def action_filter_state(self: DebuggerApp) -> None:
        table = self.query_one(RequestTable)
        table.arrange(order=table.order, state=following(STATE_FILTERS, table.state_filter))
        self._sync_selection()
