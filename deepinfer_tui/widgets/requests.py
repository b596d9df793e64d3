"""The request table: one row per request, redrawn row by row (never rebuilt).

The cursor row is the selection the other panes follow.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.actions import SkipAction

from ..columns import CELL_PADDING, COLUMNS, ORDERS, Cell, request_cells
from .row_table import RowTable
from .view import View


class RequestTable(RowTable):
    """Requests in submission order (or sorted, or one state only); `show(view)` redraws the
    rows whose cells changed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Every request's cells (all columns), and the view they were made from: the engine
        # hands out the same view of a finished request until it changes, so thousands of
        # finished rows cost one `is` each.
        self._all_cells: dict[str, tuple[Cell, ...]] = {}
        self._drawn_from: dict[str, object] = {}
        # Each request's cells of the columns shown, made when they change: the table then
        # finds an unchanged row by identity.
        self._shown_cells: dict[str, tuple[Cell, ...]] = {}
        # Widest text seen per column, hidden ones too: which columns fit depends on them.
        self._widest: dict[str, int] = {}
        self._columns: tuple[int, ...] = ()  # indexes into COLUMNS of the columns shown
        self._view: View | None = None
        self.order: str | None = None  # the column rows are sorted by (None: submission)
        self.state_filter: str | None = None  # the one state shown (None: every request)
        # Set in a replay: Home and End go to its first and last frame, not the first and
        # last row (the app's keys; Textual passes a skipped action's key on to them).
        self.passes_home_end = False

    def action_home(self) -> None:
        if self.passes_home_end:
            raise SkipAction
        super().action_home()

    def action_end(self) -> None:
        if self.passes_home_end:
            raise SkipAction
        super().action_end()

    def on_mount(self) -> None:
        for column in COLUMNS:
            self._widest[column.key] = cell_len(column.header)
        self._set_columns(tuple(range(len(COLUMNS))))

    def _set_columns(self, shown: tuple[int, ...]) -> None:
        """Show these columns (rows are added again by the next show())."""
        self._columns = shown
        self._shown_cells.clear()
        self.set_columns([(COLUMNS[i].key, COLUMNS[i].header) for i in shown])

    def _columns_that_fit(self) -> tuple[int, ...]:
        """Every column if the pane is wide enough, else the ones that fit whole, dropping
        the lowest first (before the first layout: every column)."""
        room = self.scrollable_content_region.width
        shown = list(range(len(COLUMNS)))
        if room <= 0:
            return tuple(shown)

        def width() -> int:
            return sum(self._widest[COLUMNS[i].key] + CELL_PADDING for i in shown)

        for index in sorted(
            (i for i, c in enumerate(COLUMNS) if c.drop), key=lambda i: COLUMNS[i].drop
        ):
            if width() <= room:
                break
            shown.remove(index)
        return tuple(shown)

    def _refit(self) -> bool:
        """Re-choose the columns for the pane's width; True if they changed (rows redrawn)."""
        shown = self._columns_that_fit()
        if shown == self._columns or not self._columns:
            return False
        selected = self.selected_id
        self._set_columns(shown)
        if self._view is not None:
            self.show(self._view)
            if selected is not None:
                self.select(selected)
        return True

    def on_resize(self) -> None:
        self._refit()

    def arrange(self, *, order: str | None, state: str | None) -> None:
        """Sort rows by a column (largest first) and show one state only (None: neither)."""
        self.order, self.state_filter = order, state
        self._set_title(None, None)
        if self._view is not None:
            self.show(self._view)

    def _set_title(self, shown: int | None, total: int | None) -> None:
        """`Requests · by tokens · only queued · 0 of 50`: a filter says how many it shows,
        so an empty pane reads as none, not as not yet drawn."""
        order, state = self.order, self.state_filter
        parts = [f"by {order}" if order else "", f"only {state}" if state else ""]
        if state and shown is not None:
            parts.append(f"{shown} of {total}")
        title = " · ".join(["Requests", *filter(None, parts)])
        if title != self.border_title:
            self.border_title = title

    def _wanted(self, view: View) -> list[str]:
        """The ids of the rows to show, in order."""
        ids = list(view.request_ids)
        if self.state_filter is not None:
            ids = [i for i in ids if view.request(i)["status"] == self.state_filter]  # type: ignore[index]
        if self.order is not None:
            value = ORDERS[self.order]
            ids.sort(key=lambda i: value(view.request(i)), reverse=True)  # type: ignore[arg-type]
        return ids

    @property
    def selected_id(self) -> str | None:
        return self.selected_key

    def select(self, request_id: str) -> None:
        if request_id in self.row_keys:
            self.move_cursor(self.get_row_index(request_id))

    def show(self, view: View) -> None:
        self._view = view
        grew = False
        for request_id in view.request_ids:
            request = view.request(request_id)
            if self._drawn_from.get(request_id) is request:
                continue
            self._drawn_from[request_id] = request
            cells = self._all_cells[request_id] = request_cells(request)  # type: ignore[arg-type]
            self._shown_cells.pop(request_id, None)
            for column, (text, _) in zip(COLUMNS, cells):
                width = cell_len(text)
                if width > self._widest[column.key]:
                    self._widest[column.key] = width
                    grew = True
        if len(self._all_cells) > len(view.request_ids):  # submissions were undone
            for gone in set(self._all_cells) - set(view.request_ids):
                del self._all_cells[gone], self._drawn_from[gone]
                self._shown_cells.pop(gone, None)
        if grew and self._refit():  # a column grew: do the shown ones still fit?
            return
        wanted = self._wanted(view)
        self._set_title(len(wanted), len(view.request_ids))
        self.set_rows([(i, self._cells_shown(i)) for i in wanted])

    def _cells_shown(self, request_id: str) -> tuple[Cell, ...]:
        cells = self._shown_cells.get(request_id)
        if cells is None:
            every = self._all_cells[request_id]
            cells = self._shown_cells[request_id] = tuple(every[c] for c in self._columns)
        return cells
