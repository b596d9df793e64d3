"""The immutable view every pane renders from: one snapshot plus the event log.

The app builds a new `View` after every action (live session or replay frame); widgets only
read it. Keeping this Textual-free makes the panes' inputs plain data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..describe import ttl_cache_entries
from ..diff_view import RoundDiff, round_diff

Event = Mapping[str, Any]
RequestView = Mapping[str, Any]


@dataclass(frozen=True)
class ReplayPosition:
    """Where a replay stands, for the header."""

    index: int
    count: int
    label: str
    divergence: str | None = None
    header_width: int = 0  # the widest frame's full first header line: its form stays put


@dataclass(frozen=True)
class ComputingRound:
    """A round too long for the event loop, being computed on a thread of its own."""

    round: int
    positions: int  # rows it computes before its first token, at most

    def describe(self) -> str:
        return f"round {self.round} is still being computed ({self.positions:,} positions)"


@dataclass(frozen=True)
class View:
    snapshot: Mapping[str, Any]
    log: Sequence[Event]
    replay: ReplayPosition | None = None
    auto_running: bool = False
    auto_waiting: str | None = None  # what auto-run waits for before its next round
    computing: ComputingRound | None = None  # a round being computed on its own thread
    exporting: bool = False  # an export is being written on its own thread
    auto_interval: float | None = None  # seconds between auto-run's rounds (None: not live)
    previous: Mapping[str, Any] | None = None  # the frame before this one, for the diff
    since: str = ""  # what led from that frame to this one ("step", "cancel request-2")
    # Ids in table order, computed once so every pane agrees on it.
    request_ids: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        ids = tuple(r["id"] for r in self.snapshot.get("requests", []))
        object.__setattr__(self, "request_ids", ids)

    @property
    def tick(self) -> int:
        return int(self.snapshot.get("tick", 0))

    @cached_property
    def diff(self) -> RoundDiff | None:
        """What changed since the frame before (None: there is none), computed when asked."""
        return None if self.previous is None else round_diff(self.previous, self.snapshot)

    @cached_property
    def _requests(self) -> dict[str, RequestView]:
        return {r["id"]: r for r in self.snapshot.get("requests", [])}

    def request(self, request_id: str | None) -> RequestView | None:
        if request_id is None:
            return None
        return self._requests.get(request_id)

    def events_this_tick(self, request_id: str, kind: str) -> list[Event]:
        """This request's events of one kind since the last round (e.g. user rollbacks)."""
        found: list[Event] = []
        for event in reversed(self.log):
            if event.get("tick") != self.tick:
                break
            if event.get("kind") == kind and event.get("request_id") == request_id:
                found.append(event)
        found.reverse()
        return found

    def cached_prefixes_of(self, request: RequestView) -> list[Mapping[str, Any]]:
        """Cache entries whose tokens start the request's sequence (where a finished one lives)."""
        sequence = list(request.get("prompt", [])) + list(request.get("generated", []))
        return [
            entry
            for entry in ttl_cache_entries(self.snapshot)
            if entry["tokens"] and sequence[: len(entry["tokens"])] == list(entry["tokens"])
        ]


def frame_views(frames: Sequence[Any]) -> Iterator[View]:
    """A view of each of a replay's frames (their `label`, `snapshot` and `log`), as the
    header would show it there."""
    for index, frame in enumerate(frames):
        position = ReplayPosition(index, len(frames), frame.label)
        yield View(frame.snapshot, frame.log, replay=position)
