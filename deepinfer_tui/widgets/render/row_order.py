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

from collections.abc import Iterator
from contextlib import contextmanager
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
        # "ordered" (rows) and "offsets" (line -> row key, offset): each with the key it is for.
        self._lists: dict[str, tuple[tuple[int, int], list[Any]]] = {}
        super().__init__(**kwargs)

    def _stable(self) -> bool:
        return HOOKABLE and self._single_line_rows

    def _key(self) -> tuple[int, int]:
        return (len(self.rows), self._structure)

    def _kept(self, name: str, listed: property) -> list[Any]:
        """DataTable's list behind the property `listed`, computed again only if rows moved."""
        assert listed.fget is not None
        if not self._stable():
            return listed.fget(self)  # type: ignore[no-any-return]
        kept = self._lists.get(name)
        if kept is None or kept[0] != self._key():
            kept = self._lists[name] = (self._key(), listed.fget(self))
        return kept[1]

    @property
    def ordered_rows(self) -> list[Row]:
        assert _ORDERED_ROWS is not None
        return self._kept("ordered", _ORDERED_ROWS)

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        assert _Y_OFFSETS is not None
        return self._kept("offsets", _Y_OFFSETS)

    @contextmanager
    def _restructuring(self) -> Iterator[None]:
        """Around a change to the rows' order: nothing listed before or during it is kept."""
        self._structure += 1
        self._lists.clear()
        try:
            yield
        finally:
            self._structure += 1
            self._lists.clear()

    def add_row(self, *cells: Any, height: int | None = 1, **kwargs: Any) -> RowKey:
        if height != 1:
            self._single_line_rows = False
        # A row is added at the bottom: lists that were current get it appended (requests
        # arrive every few rounds; listing thousands of rows again for each was the cost).
        before, current = self._key(), dict(self._lists)
        with self._restructuring():
            row_key = super().add_row(*cells, height=height, **kwargs)
        if self._stable():
            added = {"ordered": self.rows[row_key], "offsets": (row_key, 0)}
            for name, (key, listed) in current.items():
                if key == before:
                    listed.append(added[name])
                    self._lists[name] = (self._key(), listed)
        return row_key

    def remove_row(self, row_key: RowKey | str) -> None:
        with self._restructuring():
            super().remove_row(row_key)

    def sort(self, *columns: Any, **kwargs: Any) -> Any:
        with self._restructuring():
            return super().sort(*columns, **kwargs)

    def clear(self, columns: bool = False) -> Any:
        with self._restructuring():
            result = super().clear(columns)
        self._single_line_rows = True
        return result
