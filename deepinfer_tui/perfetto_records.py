"""The Perfetto export's time base and its Chrome trace-event records (slices, counters, names).

Time is synthetic: engine rounds have no measured duration, so round t is drawn from
(t - 1) * ROUND_US to t * ROUND_US microseconds, and what happens between rounds t and t + 1
(a submit, a cancel, a clock move) sits at t * ROUND_US. Everything is an integer number of
microseconds, so the same session always gives the same file.
"""

from __future__ import annotations

from typing import Any

ROUND_US = 1000  # synthetic time: one engine round is drawn as 1000 µs
ENGINE_TID = 0
PID = 1  # one process: the session

Record = dict[str, Any]


def round_start(tick: int) -> int:
    return (tick - 1) * ROUND_US


def round_end(tick: int) -> int:
    """The end of round `tick`, which is also the moment between it and the next round."""
    return tick * ROUND_US


def complete(name: str, ts: int, dur: int, tid: int, category: str, args: dict[str, Any]) -> Record:
    """A slice with its duration (phase "X")."""
    return {
        "ph": "X",
        "name": name,
        "cat": category,
        "pid": PID,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def counter(name: str, ts: int, values: dict[str, float]) -> Record:
    """A counter track's value from `ts` on (phase "C"); each key is a series of the track."""
    return {"ph": "C", "name": name, "pid": PID, "tid": ENGINE_TID, "ts": ts, "args": values}


def metadata(name: str, tid: int, args: dict[str, Any]) -> Record:
    """A process or thread naming/ordering record (phase "M")."""
    return {"ph": "M", "name": name, "pid": PID, "tid": tid, "ts": 0, "args": args}
