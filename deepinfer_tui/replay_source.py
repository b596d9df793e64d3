"""What the app needs from a saved trace being viewed (`deepinfer_tui.replay.Replay`):
read-only stepping through its frames. A protocol, so the app does not import the replayer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .session import Session


class ReplayFrame(Protocol):
    # Read-only members: a replay's own frames may hold narrower types (dict, list).
    @property
    def snapshot(self) -> Mapping[str, Any]: ...

    @property
    def log(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def label(self) -> str: ...


class ReplayLike(Protocol):
    @property
    def frames(self) -> Sequence[ReplayFrame]: ...

    @property
    def position(self) -> int: ...

    @property
    def divergence(self) -> str | None: ...

    @property
    def current(self) -> ReplayFrame: ...

    def forward(self) -> bool: ...

    def back(self) -> bool: ...

    def session_at(self, position: int) -> Session: ...
