"""The selected request's last draft tree: what was proposed, verified, accepted, rejected."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer
from textual.content import Content
from textual.geometry import Offset, Region, Size
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ..describe import format_tokens
from ..legend import VERDICT_MARKS
from ..tree_view import node_label, replacement_line, tree_words
from .render.quiet import RefreshesHeld, refresh_rows
from .render.repaint_style import StyleOncePerRepaint
from .view import RequestView, View

Node = Mapping[str, Any]
TOP_IN_PANE = 3  # tokens of a replacement's distribution the pane lists (the export: all)


def root_label(request: RequestView, tree: Mapping[str, Any], tick: int) -> Text:
    root = tree["nodes"][0]
    mark = VERDICT_MARKS["root"]
    text = Text()
    text.append(f"{mark.symbol} {root['token']}", style=mark.style)
    text.append(" pending")
    commit = request.get("last_commit")
    if commit and commit.get("round") == tree["round"]:
        text.append(f" → {format_tokens(commit['tokens'])}", style="bold")
    if tree["round"] != tick:
        text.append(f" (t{tree['round']}, now t{tick})", style="bright_black")
    return text


def extra_token(request: RequestView, tree: Mapping[str, Any]) -> tuple[int, str] | None:
    """The token the target added after the accepted path (bonus / replacement / eos)."""
    commit = request.get("last_commit")
    if not commit or commit.get("round") != tree["round"]:
        return None
    tokens: Sequence[int] = commit["tokens"]
    accepted = int(commit["accepted"])
    if len(tokens) <= accepted:
        return None  # max_tokens cut the round short
    return tokens[accepted], str(commit["outcome"])


def _bindings_without_space() -> list[BindingType]:
    """Tree's bindings and the scrolling ones it inherits, Tree's winning, less space."""
    tree = [b for b in Tree.BINDINGS if isinstance(b, Binding)]
    keys = {b.key for b in tree}
    scrolling = [
        b for b in ScrollableContainer.BINDINGS if isinstance(b, Binding) and b.key not in keys
    ]
    return [b for b in scrolling + tree if b.key != "space"]


class DraftTree(RefreshesHeld, StyleOncePerRepaint, Tree[int], inherit_bindings=False):
    """A read-only Tree; space is left to the app (step), so the node toggle is not bound.
    (`inherit_bindings` must be a class keyword: as an attribute Textual ignores it.)"""

    BINDINGS: ClassVar[list[BindingType]] = _bindings_without_space()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("no draft round yet", **kwargs)
        self.show_root = True
        self.guide_depth = 3
        self._signature: tuple[Any, ...] | None = None

    def show(self, view: View, request_id: str | None) -> None:
        request = view.request(request_id)
        tree = request.get("tree") if request else None
        commit = request.get("last_commit") if request else None
        signature = (request_id, view.tick, repr(tree), repr(commit))
        if signature == self._signature:
            return  # unchanged: keep the user's cursor and scroll position
        self._signature = signature
        # Tree asks for a screen layout at every node it adds; a layout pass costs the
        # keypress a second frame (it refreshes every scrollbar on screen). The pane's box is
        # fixed by the grid, so a layout is only needed when scrollbars come or go. And Tree
        # repaints the whole pane when it is rebuilt, though a round usually changes a few of
        # its rows (and the round in its title): only the rows that differ are repainted.
        had_scrollbars = self.show_vertical_scrollbar or self.show_horizontal_scrollbar
        before = self._visible_rows()
        with self.refreshes_held() as wanted:
            self._rebuild(view, request, tree)
            _ = self.last_line  # builds the lines now, which sets the new virtual size
        repaint_wanted, layout_wanted = wanted
        width, height = self.container_size
        fits = self.virtual_size.width <= width and self.virtual_size.height <= height
        if layout_wanted and (had_scrollbars or not fits or not self.is_mounted):
            self.refresh(layout=True)
        elif repaint_wanted:
            self._repaint_changed_rows(before)

    def _visible_rows(self) -> tuple[Offset, Size, str | None, list[Strip]] | None:
        """What the pane shows now: scroll offset, size, title and each visible tree line
        (the rows below the last line are blank)."""
        if not self.is_mounted:
            return None
        scroll_y = round(self.scroll_offset.y)
        lines = min(self.scrollable_content_region.height, self.last_line + 1 - scroll_y)
        with self.style_held():
            rows = [self.render_line(y) for y in range(max(lines, 0))]
        return self.scroll_offset, self.size, self.border_title, rows

    def _repaint_changed_rows(
        self, before: tuple[Offset, Size, str | None, list[Strip]] | None
    ) -> None:
        after = self._visible_rows()
        if before is None or after is None or before[:2] != after[:2]:
            self.refresh()  # scrolled or resized: everything moved
            return
        width = self.scrollable_content_region.width
        if before[2] != after[2]:
            # The border's top row, which holds the title (regions are content-relative).
            top, left = self.styles.gutter.top, self.styles.gutter.left
            if top:
                self.refresh(Region(-left, -top, self.outer_size.width, 1))
        old_rows, new_rows = before[3], after[3]
        changed = (
            y
            for y in range(max(len(old_rows), len(new_rows)))
            if y >= len(old_rows) or y >= len(new_rows) or old_rows[y] != new_rows[y]
        )
        refresh_rows(self, changed, width)

    def _rebuild(
        self, view: View, request: RequestView | None, tree: Mapping[str, Any] | None
    ) -> None:
        self.clear()
        if request is None:
            self.root.set_label(Text("no request selected", style="italic"))
            self.border_title = "Draft tree"
            return
        # Plain Content: a title string is markup, and escape() misses tags such as [B].
        self.border_title = Content(f"Draft tree · {request['id']}")
        if not tree:
            snapshot = view.snapshot
            drafter = snapshot.get("session", {}).get("draft")  # an n-gram drafter runs no model
            if snapshot.get("models", {}).get("draft") is None and drafter is None:
                why = "greedy: no draft model"
            elif view.events_this_tick(str(request["id"]), "rollback"):
                why = "tree cleared by the rollback"
            else:
                why = "no draft round yet"
            # The border title names the request: the label stays short enough for a narrow pane.
            self.root.set_label(Text(why, style="italic"))
            return
        self.border_title = Content(f"Draft tree · {request['id']} · round {tree['round']}")
        self._populate(request, tree, view.tick)

    def _populate(self, request: RequestView, tree: Mapping[str, Any], tick: int) -> None:
        nodes: Sequence[Node] = tree["nodes"]
        self.root.set_label(root_label(request, tree, tick))
        self.root.data = nodes[0]["id"]
        children: dict[int, list[Node]] = {}
        for node in nodes[1:]:
            children.setdefault(int(node["parent"]), []).append(node)
        # The accepted path ends where the target's extra token hangs.
        path_end = int(nodes[0]["id"])
        while True:
            accepted = [n for n in children.get(path_end, []) if n["verdict"] == "accepted"]
            if not accepted:
                break
            path_end = int(accepted[0]["id"])
        extra = extra_token(request, tree)
        words = tree_words(request, tree)
        source = words.replacement_source
        for line in words.ngram:
            self.root.add_leaf(line)

        def grow(parent: TreeNode[int], node_id: int) -> None:
            for child in children.get(node_id, []):
                kids = children.get(int(child["id"]))
                has_extra = extra is not None and int(child["id"]) == path_end
                label = node_label(child, words.rejection)
                if kids or has_extra:
                    branch = parent.add(label, data=int(child["id"]), expand=True)
                    grow(branch, int(child["id"]))
                else:
                    parent.add_leaf(label, data=int(child["id"]))
            if extra is not None and node_id == path_end:
                token, outcome = extra
                mark = VERDICT_MARKS["extra"]
                label = Text(f"{mark.symbol} {token} {outcome}", style=mark.style)
                if source is not None and outcome == "replacement":
                    # A sampled replacement: the distribution it was drawn from, its top below.
                    label.append(f" ~ {words.replacement_from}", style=mark.style)
                    drawn = parent.add(label, expand=True)
                    drawn.add_leaf(replacement_line(source, TOP_IN_PANE))
                else:
                    label.append(" (target)", style="bright_black")
                    parent.add_leaf(label)

        grow(self.root, int(nodes[0]["id"]))
        self.root.expand()
