"""The row table's stylesheet: the theme's colours DataTable uses, so both look alike."""

# The theme's colours for a row table (those Textual's DataTable uses, so both look alike).
ROW_TABLE_CSS = """
RowTable {
    background: $surface;
    color: $foreground;
    height: auto;
    max-height: 100%;
    & > .row-table--header {
        text-style: bold;
        background: $panel;
    }
    & > .row-table--stripe {
        background: $surface-lighten-1 50%;
    }
    &:dark > .row-table--stripe {
        background: $surface-darken-1 40%;
    }
    & > .row-table--cursor {
        background: $block-cursor-blurred-background;
        color: $block-cursor-blurred-foreground;
        text-style: $block-cursor-blurred-text-style;
    }
    &:focus {
        background-tint: $foreground 5%;
        & > .row-table--header {
            background-tint: $foreground 5%;
        }
        & > .row-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
}
"""
