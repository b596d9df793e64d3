"""Render-speed helpers the panes build on; each keeps a keypress to one cheap frame.

- `quiet`: updates that repaint a pane without a screen layout, and scrollbars only on change.
- `text_strips`: a line of Rich text that fits, drawn from Rich's segments (no Content).
- `repaint_style`: a widget's Rich style looked up once per repaint, not once per line.
"""
