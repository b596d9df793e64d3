"""Schedule policies: the order waiting requests are admitted in, and who is preempted.

`fcfs` admits in arrival order and preempts the most recently admitted request (vLLM's
default). `priority` admits the smallest `priority` first, ties by arrival, and preempts the
lowest priority (largest value), latest arrival (vLLM's priority policy). `lpm` admits the
request with the longest cached prefix first, as SGLang's cache-aware policy does, and falls
back to arrival order when the queue is long (the match for every waiting request costs more
than it saves there).
"""

from __future__ import annotations

from collections.abc import Callable

from .request import Request

# SGLang switches its longest-prefix-match policy to first-come-first-served above this many
# waiting requests.
LPM_QUEUE_LIMIT = 128

RULES = {
    "fcfs": "fcfs: running requests first, then waiting ones in arrival order",
    "priority": "priority: running requests first, then waiting ones by priority, then arrival",
    "lpm": "lpm: running requests first, then waiting ones by longest cached prefix",
}


def admission_order(
    policy: str, waiting: list[Request], cached_length: Callable[[Request], int]
) -> list[Request]:
    """The order in which requests that hold no rows are admitted."""
    if policy == "priority":
        return sorted(waiting, key=lambda r: (r.priority, r.arrival))
    if policy == "lpm" and len(waiting) <= LPM_QUEUE_LIMIT:
        return sorted(waiting, key=lambda r: (-cached_length(r), r.arrival))
    return waiting  # fcfs: the queue's own order


def preemption_victim(policy: str, candidates: list[Request]) -> tuple[Request, str]:
    """The request that gives its blocks back, and the rule that chose it."""
    if policy == "priority":
        victim = max(candidates, key=lambda r: (r.priority, r.arrival))
        return victim, (
            f"priority: {victim.request_id} has the lowest priority ({victim.priority}), "
            "latest arrival"
        )
    victim = max(candidates, key=lambda r: r.admitted)
    return victim, f"{policy}: {victim.request_id} was the most recently admitted"
