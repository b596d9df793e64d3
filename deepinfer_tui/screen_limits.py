"""What a screen can show of a KV block, for the warning at start (no Textual: the CLI
prints it before the engine is built, which takes long for such blocks)."""

from __future__ import annotations

CELLS_PER_SLOT = 2  # a token id drawn slot by slot takes at least two cells


def large_block_warning(block_size: int, columns: int, rows: int) -> str | None:
    """A warning when one block has more slots than a `columns` x `rows` screen could draw
    slot by slot; None when it fits."""
    if block_size * CELLS_PER_SLOT <= columns * rows:
        return None
    return (
        f"blocks of {block_size:,} slots are more than a {columns}x{rows} screen can show slot "
        "by slot: the block map draws each as one row (its positions, fill and state); a pool "
        "of such blocks takes long to allocate and to step"
    )
