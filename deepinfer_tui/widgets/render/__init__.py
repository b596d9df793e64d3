"""Render-speed helpers the panes build on; each keeps a keypress to one cheap frame.

- `keyed_table`: a DataTable whose cell and line caches are keyed on what each cell shows.
- `row_order`: DataTable row order and line offsets that survive cell updates.
- `quiet`: updates that repaint a pane without a screen layout, and scrollbars only on change.
- `repaint_style`: a widget's Rich style looked up once per repaint, not once per line.
"""
