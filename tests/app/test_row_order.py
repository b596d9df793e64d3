"""StableRowOrder keeps DataTable's row order across cell updates: it must agree with a plain
DataTable after every kind of change, on what it lists and on what it draws."""

from __future__ import annotations

import random

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from deepinfer_tui.widgets.render.row_order import HOOKABLE, StableRowOrder

COLUMNS = ("name", "count")


class StableTable(StableRowOrder, DataTable[str]):
    pass


class TwoTables(App[None]):
    def compose(self) -> ComposeResult:
        yield StableTable(id="stable")
        yield DataTable(id="plain")

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            table.styles.height = 8
            for column in COLUMNS:
                table.add_column(column, key=column)


def change(table: DataTable[str], move: str, rng: random.Random, serial: int) -> None:
    """One change, made to both tables with the same random choices."""
    keys = [row.key.value for row in table.ordered_rows]
    if move == "add" or not keys:
        table.add_row(f"r{serial}", str(rng.randrange(100)), key=f"r{serial}")
    elif move == "add-tall":
        table.add_row(f"t{serial}", "x\ny", key=f"t{serial}", height=2)
    elif move == "update":
        table.update_cell(rng.choice(keys), "count", str(rng.randrange(100)))
    elif move == "remove":
        table.remove_row(rng.choice(keys))
    elif move == "sort":
        table.sort("count", reverse=rng.random() < 0.5)
    elif move == "clear":
        table.clear()
    elif move == "cursor":
        table.move_cursor(row=rng.randrange(len(keys)))


def drawn(table: DataTable[str]) -> list[str]:
    lines = []
    for top in range(0, table.virtual_size.height, 4):
        table.scroll_to(y=top, animate=False, immediate=True)
        lines += ["".join(s.text for s in table.render_line(y)) for y in range(table.size.height)]
    return lines


def listed(table: DataTable[str]) -> tuple[object, ...]:
    keys = [row.key.value for row in table.ordered_rows]
    return (
        keys,
        [table.get_row_index(key) for key in keys],
        table.virtual_size,
        table.cursor_coordinate,
    )


MOVES = ["add"] * 4 + ["update"] * 6 + ["remove", "sort", "cursor", "clear"]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("tall_rows", [False, True])
async def test_a_stable_table_lists_and_draws_what_a_plain_table_does(
    seed: int, tall_rows: bool
) -> None:
    assert HOOKABLE, "this Textual lacks the properties StableRowOrder keys on"
    app = TwoTables()
    async with app.run_test(size=(40, 20)) as pilot:
        stable, plain = app.query_one("#stable", DataTable), app.query_one("#plain", DataTable)
        moves = MOVES + (["add-tall"] if tall_rows else [])
        for serial in range(50):
            move = random.Random(seed * 1000 + serial).choice(moves)
            for table in (stable, plain):
                change(table, move, random.Random(serial), serial)
            await pilot.pause()
            assert listed(stable) == listed(plain), f"after {move} #{serial}"
            if serial % 10 == 9:
                assert drawn(stable) == drawn(plain), f"after {move} #{serial}"
