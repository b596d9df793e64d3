"""The log's `queued` line names a request's priority and sampling when they are not the
defaults, from the engine's own event."""

from __future__ import annotations

from deepinfer_tui.describe import describe
from deepinfer_tui.scenario import default_scenario
from deepinfer_tui.session import Session


def queued_line(session: Session, request_id: str) -> str:
    (event,) = [e for e in session.log() if e["kind"] == "queued" and e["request_id"] == request_id]
    return describe(event)


def test_the_queued_line_names_priority_and_sampling_only_when_set() -> None:
    session = Session(default_scenario())
    sampled = session.submit(
        [1, 2], 3, priority=4, sampling={"temperature": 0.8, "top_k": 20, "seed": 123}
    )
    plain = session.submit([1, 3], 3)
    assert queued_line(session, sampled) == (
        f"t0 {sampled} queued: 2 prompt positions, up to 3 new tokens, priority 4, "
        "sampling T0.8 k20 s123"
    )
    assert (
        queued_line(session, plain) == f"t0 {plain} queued: 2 prompt positions, up to 3 new tokens"
    )
