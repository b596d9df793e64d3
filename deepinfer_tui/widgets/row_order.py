"""DataTable row order and line offsets that survive cell updates.

DataTable caches its ordered rows and each line's (row, offset) under a table-wide update
counter that every `update_cell` bumps, so each round's few changed cells make it list every
row again, in Python, several times per repaint: at thousands of finished requests that was
a third of a keypress. Cell updates cannot reorder rows or (at a fixed height) resize them,
so `StableRowOrder` keys both on the row structure instead, which only adding, removing,
sorting and clearing rows change.

It reads DataTable's `ordered_rows` and private `_y_offsets` through their own getters; with
a Textual that lacks them, or with any row of automatic or multi-line height, it steps aside.
"""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable
from textual.widgets.data_table import Row, RowKey

_ORDERED_ROWS = getattr(DataTable, "ordered_rows", None)
_Y_OFFSETS = getattr(DataTable, "_y_offsets", None)
HOOKABLE = isinstance(_ORDERED_ROWS, property) and isinstance(_Y_OFFSETS, property)


class StableRowOrder(DataTable[Any]):
    """Rows are listed again only when rows come, go or move."""

    def __init__(self, **kwargs: Any) -> None:
        self._structure = 0  # bumped before and after every change to the rows' order
        self._single_line_rows = True  # False once a row of another height is added
        self._ordered: tuple[tuple[int, int], list[Row]] | None = None
        self._offsets: tuple[tuple[int, int], list[tuple[RowKey, int]]] | None = None
        super().__init__(**kwargs)

    def _stable(self) -> bool:
        return HOOKABLE and self._single_line_rows

    @property
    def ordered_rows(self) -> list[Row]:
        assert _ORDERED_ROWS is not None and _ORDERED_ROWS.fget is not None
        if not self._stable():
            return _ORDERED_ROWS.fget(self)  # type: ignore[no-any-return]
        key = (len(self.rows), self._structure)
        if self._ordered is None or self._ordered[0] != key:
            self._ordered = (key, _ORDERED_ROWS.fget(self))
        return self._ordered[1]

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        assert _Y_OFFSETS is not None and _Y_OFFSETS.fget is not None
        if not self._stable():
            return _Y_OFFSETS.fget(self)  # type: ignore[no-any-return]
        key = (len(self.rows), self._structure)
        if self._offsets is None or self._offsets[0] != key:
            self._offsets = (key, _Y_OFFSETS.fget(self))
        return self._offsets[1]

    def _restructure(self) -> None:
        self._structure += 1
        self._ordered = self._offsets = None

    def add_row(self, *cells: Any, height: int | None = 1, **kwargs: Any) -> RowKey:
        if height != 1:
            self._single_line_rows = False
        # A row is added at the bottom: lists that were current get it appended (requests
        # arrive every few rounds; listing thousands of rows again for each was the cost).
        current = (len(self.rows), self._structure)
        ordered, offsets = self._ordered, self._offsets
        self._restructure()
        try:
            row_key = super().add_row(*cells, height=height, **kwargs)
        finally:
            self._restructure()
        key = (len(self.rows), self._structure)
        if ordered is not None and ordered[0] == current and self._stable():
            ordered[1].append(self.rows[row_key])
            self._ordered = (key, ordered[1])
            if offsets is not None and offsets[0] == current:
                offsets[1].append((row_key, 0))
                self._offsets = (key, offsets[1])
        return row_key

    def remove_row(self, row_key: RowKey | str) -> None:
        self._restructure()
        try:
            super().remove_row(row_key)
        finally:
            self._restructure()

    def sort(self, *columns: Any, **kwargs: Any) -> Any:
        self._restructure()
        try:
            return super().sort(*columns, **kwargs)
        finally:
            self._restructure()

    def clear(self, columns: bool = False) -> Any:
        self._restructure()
        try:
            return super().clear(columns)
        finally:
            self._single_line_rows = True
            self._restructure()
