"""The request table: one row per request, updated cell by cell (never rebuilt).

The cursor row is the selection the other panes follow.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.actions import SkipAction
from textual.widget import Widget
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from ..columns import CELL_PADDING, COLUMNS, ORDERS, Cell, request_cells
from .render.keyed_table import ContentKeyedDataTable
from .render.quiet import RefreshesHeld, extent_keeps_box, refresh_rows, set_scroll_extent
from .render.row_order import StableRowOrder
from .view import View


def _text(cell: Cell) -> Text:
    return Text(cell[0], style=cell[1])


class RequestTable(RefreshesHeld, StableRowOrder, ContentKeyedDataTable[Text]):
    """Requests in submission order; `show(view)` diffs against what is on screen."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._shown: dict[str, tuple[Cell, ...]] = {}
        # The view each row was drawn from: the engine hands out the same view of a finished
        # request until it changes, so thousands of finished rows cost one `is` each.
        self._drawn_from: dict[str, object] = {}
        # Widest text seen per column: DataTable re-measures a whole column when asked to
        # update widths, so ask only when a cell outgrows it (keeps 64-row refreshes cheap).
        self._widths: dict[str, int] = {}

        self._rows_repainted = False  # inside show(): the changed lines are repainted
        self._columns: tuple[int, ...] = ()  # indexes into COLUMNS of the columns shown
        self._view: View | None = None
        self.order: str | None = None  # the column rows are sorted by (None: submission)
        self.state_filter: str | None = None  # the one state shown (None: every request)
        # Set in a replay: Home and End go to its first and last frame, not the first and
        # last column (the app's keys; Textual passes a skipped action's key on to them).
        self.passes_home_end = False

    def action_scroll_home(self) -> None:
        if self.passes_home_end:
            raise SkipAction
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        if self.passes_home_end:
            raise SkipAction
        super().action_scroll_end()

    def on_mount(self) -> None:
        for column in COLUMNS:
            self._widths[column.key] = cell_len(column.header)
        self._set_columns(tuple(range(len(COLUMNS))))

    def _set_columns(self, shown: tuple[int, ...]) -> None:
        """Show these columns (rows are added again by the next show())."""
        self.clear(columns=True)
        self._shown.clear()
        self._drawn_from.clear()
        self._columns = shown
        for index in shown:
            self.add_column(COLUMNS[index].header, key=COLUMNS[index].key)

    def _columns_that_fit(self) -> tuple[int, ...]:
        """Every column if the pane is wide enough, else the ones that fit whole, dropping
        the lowest first (before the first layout: every column)."""
        room = self.scrollable_content_region.width
        shown = list(range(len(COLUMNS)))
        if room <= 0:
            return tuple(shown)

        def width() -> int:
            return sum(self._widths[COLUMNS[i].key] + CELL_PADDING for i in shown)

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
            self._show(self._view)
            if selected is not None:
                self.select(selected)
        return True

    def on_resize(self) -> None:
        self._refit()

    def arrange(self, *, order: str | None, state: str | None) -> None:
        """Sort rows by a column (largest first) and show one state only (None: neither)."""
        selected = self.selected_id
        self.order, self.state_filter = order, state
        self.clear()
        self._shown.clear()
        self._drawn_from.clear()
        parts = [f"by {order}" if order else "", f"only {state}" if state else ""]
        self.border_title = " · ".join(["Requests", *filter(None, parts)])
        if self._view is not None:
            self.show(self._view)
            if selected is not None:
                self.select(selected)

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
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        return row_key.value

    def select(self, request_id: str) -> None:
        with suppress(RowDoesNotExist):
            self.move_cursor(row=self.get_row_index(request_id))

    def show(self, view: View) -> None:
        self._view = view
        # update_cell refreshes the whole table each time: 64 rows x 3 changed cells a round.
        with self.refreshes_held() as wanted:
            changed = self._show(view)
            if changed is None and self._refit():  # a column grew: does it still fit?
                changed = None
        repaint, layout = wanted
        if layout:
            self.refresh(layout=True)
        elif repaint:
            self._refresh_rows(changed)
        self._update_dimensions_now()

    def _update_dimensions_now(self) -> None:
        """Measure grown cells and fit the scroll range to rows that came or went now, as
        DataTable does on idle: its scrollbar's repaint then reaches the rows' frame, not
        one ~30 ms later."""
        updated, new_rows = getattr(self, "_updated_cells", None), getattr(self, "_new_rows", None)
        if not isinstance(updated, set) or not isinstance(new_rows, set):
            return  # another Textual: its idle handler does this
        if updated:
            cells = updated.copy()
            updated.clear()
            self._update_column_widths(cells)
        if getattr(self, "_require_update_dimensions", False):
            self._require_update_dimensions = False
            rows = new_rows.copy()
            new_rows.clear()
            self._rows_repainted = True  # show() repainted the lines that changed
            try:
                self._update_dimensions(rows)
            finally:
                self._rows_repainted = False

    def _update_dimensions(self, *arguments: Any) -> None:
        # DataTable calls this on idle once rows came or went, and its new virtual size lays
        # out the whole screen, whose scrollbar refreshes then paint a second frame. While
        # the table's box and scrollbar stay as they are, set the extent without a layout.
        before = self.virtual_size
        with self.refreshes_held() as wanted:
            super()._update_dimensions(*arguments)  # type: ignore[misc]
        after = self.virtual_size
        repaint, layout = wanted
        if layout and (after == before or not extent_keeps_box(self, before, after)):
            self.refresh(layout=True)
        elif layout:
            self.set_reactive(Widget.virtual_size, before)
            set_scroll_extent(self, after, repaint=not self._rows_repainted)
        elif repaint:
            self.refresh()

    def _refresh_rows(self, changed: list[str] | None) -> None:
        """Repaint the rows on screen whose cells changed (None: the whole table).

        The header, the borders and unchanged rows (finished requests) keep their lines.
        """
        one_line = all(row.height == 1 for row in self.rows.values())
        if changed is None or not self.is_mounted or not one_line or self.fixed_rows:
            self.refresh()
            return
        top = round(self.scroll_offset.y) - (self.header_height if self.show_header else 0)
        width, height = self.size
        rows = sorted(self.get_row_index(request_id) - top for request_id in changed)
        refresh_rows(self, (y for y in rows if 0 <= y < height), width)

    def _show(self, view: View) -> list[str] | None:
        """Bring the rows up to date; returns the requests whose lines changed (rows added at
        the end included), or None if rows went, the order changed or a column grew (the
        table's lines moved)."""
        changed: list[str] | None = []
        wanted = self._wanted(view)
        present = set(wanted)
        kept = [key for key in self._shown if key in present]
        reordered = kept + [key for key in wanted if key not in self._shown] != wanted
        if reordered:
            self.clear()  # a sorted table whose order changed: its rows again, in order
            self._shown.clear()
            self._drawn_from.clear()
            changed = None
        for gone in [key for key in self._shown if key not in present]:
            self.remove_row(gone)
            del self._shown[gone]
            self._drawn_from.pop(gone, None)
            changed = None
        drawn_from = self._drawn_from
        for request_id in wanted:
            request = view.request(request_id)
            assert request is not None
            if drawn_from.get(request_id) is request:
                continue
            drawn_from[request_id] = request
            cells = request_cells(request)
            before = self._shown.get(request_id)
            if before is None:
                # Appended after the rows on screen: only its own line is new, unless a
                # column grows (every line is drawn again).
                self.add_row(*(_text(cells[i]) for i in self._columns), key=request_id)
                for column, new in zip(COLUMNS, cells):
                    width = cell_len(new[0])
                    if width > self._widths[column.key]:
                        self._widths[column.key] = width
                        changed = None
                if changed is not None:
                    changed.append(request_id)
            elif before != cells:
                for index, (column, old, new) in enumerate(zip(COLUMNS, before, cells)):
                    if old != new:
                        width = cell_len(new[0])
                        wider = width > self._widths[column.key]
                        if wider:
                            self._widths[column.key] = width
                            changed = None
                        if index in self._columns:
                            self.update_cell(request_id, column.key, _text(new), update_width=wider)
                if changed is not None:
                    changed.append(request_id)
            self._shown[request_id] = cells
        return changed
