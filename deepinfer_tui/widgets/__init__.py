"""The debugger's panes; each renders from a `View` and never touches the engine. The helpers
that make them fast are in `render/`."""

from .blocks import BlockMap
from .commit_log import CommitLog
from .draft_tree import DraftTree
from .requests import RequestTable
from .status import StatusBar
from .view import ReplayPosition, View

__all__ = [
    "BlockMap",
    "CommitLog",
    "DraftTree",
    "ReplayPosition",
    "RequestTable",
    "StatusBar",
    "View",
]
