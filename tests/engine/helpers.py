"""Shared checks for the engine tests, written against public data only.

Everything here reads `engine.snapshot()`, `engine.metrics()`, `engine.result()`,
`engine.committed_state()` and `engine.trace`; nothing reaches into engine internals. The
oracle is `sample_generate` with the request's sampling as its view shows it (seed included):
for a greedy request that is `greedy_generate`; both recompute the whole sequence per token.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any
from weakref import WeakKeyDictionary

from engine import Engine, Generation, Result, SamplingParams, TinyModel, sample_generate
from tests.engine.policy_checks import cache_holdings, check_cache_policy

TOLERANCE = 1e-10
FREE_STATES = ("free", "dropped")  # "dropped" = free, released during the latest round


class ManualClock:
    """An injected clock: time moves only when a test says so."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Tripwire:
    """Counts the calls made at one point of a round and raises on a chosen one."""

    def __init__(
        self, fire_at: int | None = None, failure: type[BaseException] = KeyboardInterrupt
    ) -> None:
        self.calls = 0
        self.fire_at = fire_at
        self.failure = failure

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == self.fire_at:
            raise self.failure(f"interrupted at call {self.calls}")


class TrippingClock(ManualClock):
    """A manual clock that can also trip a wire each time the engine reads it."""

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(now)
        self.tripwire: Tripwire | None = None

    def __call__(self) -> float:
        if self.tripwire is not None:
            self.tripwire()
        return self.now


def wire(owner: object, name: str, tripwire: Tripwire) -> Callable[[], None]:
    """Route calls of `owner.name` through the tripwire; returns the function that unwires."""
    original = getattr(owner, name)

    def wired(*args: Any, **kwargs: Any) -> Any:
        tripwire()
        return original(*args, **kwargs)

    setattr(owner, name, wired)
    return lambda: delattr(owner, name)  # the class's own method shows through again


INTERRUPT_POINTS = ("target forward", "draft forward", "clock", "allocate", "release", "hold")


def install(
    engine: Engine, clock: TrippingClock, where: str, tripwire: Tripwire
) -> Callable[[], None]:
    """Put a tripwire at one point of the engine's rounds; returns the function removing it."""
    if where == "clock":
        clock.tripwire = tripwire
        return lambda: setattr(clock, "tripwire", None)
    owner, name = {
        "target forward": (engine.target, "forward_rows"),
        "draft forward": (engine.draft, "forward_rows"),
        # Pool hooks reach into one internal object on purpose: they are the only way to
        # interrupt a round in the middle of its bookkeeping (space, commits, publication).
        "allocate": (engine.pool, "allocate"),
        "release": (engine.pool, "release"),
        "hold": (engine.pool, "hold"),
    }[where]
    return wire(owner, name, tripwire)


def request_view(snapshot: dict[str, Any], request_id: str) -> dict[str, Any]:
    for view in snapshot["requests"]:
        if view["id"] == request_id:
            return view
    raise AssertionError(f"{request_id} is missing from the snapshot")


def events_of(events: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["kind"] == kind]


def restore_of(events: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    """The one restore event of `request_id` among `events`."""
    (restore,) = [e for e in events_of(events, "restore") if e["request_id"] == request_id]
    return restore


def oracle(
    model: TinyModel, view: dict[str, Any], max_tokens: int, eos_id: int | None = None
) -> Generation:
    """The request's oracle: its sampling (greedy by default) with its recorded seed."""
    sampling = SamplingParams.from_dict(view.get("sampling") or {})
    return sample_generate(model, view["prompt"], max_tokens, eos_id, sampling)


def check_against_oracle(engine: Engine, request_id: str, *, check_state: bool = True) -> Result:
    """A finished request's tokens and committed state equal greedy full recompute.

    stop/length: the oracle run with the request's own max_tokens and eos_id must give exactly
    the same tokens (so the engine neither stopped early nor late). cancelled/error: the
    tokens committed so far must be a prefix of the oracle's output.
    """
    result = engine.result(request_id)
    view = request_view(engine.snapshot(), request_id)
    eos_id, max_tokens = view["eos_id"], view["max_tokens"]
    if result.finish_reason in ("stop", "length"):
        expected = oracle(engine.target, view, max_tokens, eos_id)
        assert result.tokens == expected.tokens, (
            f"{request_id}: engine {result.tokens} != oracle {expected.tokens} "
            f"({result.finish_reason})"
        )
        if result.finish_reason == "stop":
            assert result.tokens and result.tokens[-1] == eos_id
        else:
            assert len(result.tokens) == max_tokens
    else:
        assert result.finish_reason in ("cancelled", "error"), result.finish_reason
        expected = oracle(engine.target, view, len(result.tokens), eos_id)
        assert result.tokens == expected.tokens, (
            f"{request_id}: {result.finish_reason} with {result.tokens}, which is not a prefix "
            f"of the oracle's output {expected.tokens}"
        )
    if check_state:
        error = engine.committed_state(request_id).max_error(expected.state)
        assert error < TOLERANCE, f"{request_id}: committed state differs by {error}"
    return result


def check_all_finished(engine: Engine, *, check_state: bool = True) -> list[Result]:
    """Oracle-check every finished request; returns their results."""
    results = []
    for view in engine.snapshot()["requests"]:
        if view["status"] == "finished":
            results.append(check_against_oracle(engine, view["id"], check_state=check_state))
    return results


def check_live_prefixes(engine: Engine) -> None:
    """Every unfinished request's committed tokens and state equal the oracle's so far."""
    for view in engine.snapshot()["requests"]:
        if view["status"] == "finished":
            continue
        generated = tuple(view["generated"])
        expected = oracle(engine.target, view, len(generated))
        assert generated == expected.tokens, f"{view['id']}: {generated} vs {expected.tokens}"
        error = engine.committed_state(view["id"]).max_error(expected.state)
        assert error < TOLERANCE, f"{view['id']}: live committed state differs by {error}"


# Every (token prefix -> block hash) an engine's snapshots have shown: a prefix keeps its hash
# through copies, rollbacks, undo and preemption, and no two prefixes share one.
_PREFIX_HASHES: WeakKeyDictionary[Engine, dict[tuple[int, ...], str]] = WeakKeyDictionary()


def check_block_hashes(engine: Engine, snapshot: dict[str, Any]) -> None:
    """A request's full blocks show the hash of their token prefix, its partial ones none."""
    seen = _PREFIX_HASHES.setdefault(engine, {})
    size = snapshot["pool"]["block_size"]
    for view in snapshot["requests"]:
        tokens = view["prompt"] + view["generated"]
        for block in view["blocks"]:
            full = None not in block["slots"]
            if not full:
                assert block["hash"] is None, f"{view['id']}: partial block {block} has a hash"
                continue
            assert block["hash"] is not None, f"{view['id']}: full block {block} has no hash"
            prefix = tuple(tokens[: (block["index"] + 1) * size])
            assert seen.setdefault(prefix, block["hash"]) == block["hash"], (
                f"{view['id']}: block {block['id']} over {prefix} shows {block['hash']}, "
                f"earlier {seen[prefix]}"
            )
    by_hash: dict[str, tuple[int, ...]] = {}
    for prefix, digest in seen.items():
        assert by_hash.setdefault(digest, prefix) == prefix, f"{prefix} and {by_hash[digest]}"


def check_block_invariants(engine: Engine) -> dict[str, Any]:
    """Pool, cache and queue bookkeeping agree with each other; returns the snapshot."""
    snapshot = engine.snapshot()
    check_block_hashes(engine, snapshot)
    blocks = snapshot["metrics"]["blocks"]
    pool = snapshot["pool"]
    size = pool["block_size"]
    assert blocks["total"] == pool["num_blocks"] == len(pool["blocks"])
    assert blocks["free"] + blocks["used"] == blocks["total"], blocks
    # "committed" is what the requests hold now: rollbacks take theirs back.
    held_tokens = sum(len(r["generated"]) for r in snapshot["requests"])
    assert snapshot["metrics"]["requests"]["committed_tokens"] == held_tokens

    holders: Counter[int] = Counter()
    request_held: set[int] = set()
    # (block, offset) -> tokens claimed there by every holder, to prove sharing is sound
    claims: dict[tuple[int, int], set[int]] = defaultdict(set)
    for view in snapshot["requests"]:
        ids = [b["id"] for b in view["blocks"]]
        assert len(ids) == len(set(ids)), f"{view['id']} holds a block twice: {ids}"
        if view["status"] == "finished":
            assert not ids, f"finished {view['id']} still holds blocks {ids}"
        tokens = view["prompt"] + view["generated"]
        assert len(ids) <= -(-len(tokens) // size), f"{view['id']} holds too many blocks"
        for index, block in enumerate(view["blocks"]):
            assert block["index"] == index and block["first_position"] == index * size
            assert len(block["slots"]) == size
            for offset, token in enumerate(block["slots"]):
                if token is not None:
                    assert token == tokens[index * size + offset]
                    claims[(block["id"], offset)].add(token)
        holders.update(ids)
        request_held.update(ids)
    cache_held: set[int] = set()
    for entry in cache_holdings(snapshot):
        assert len(entry["blocks"]) == -(-len(entry["tokens"]) // size), entry
        if "state" in entry:  # a ttl entry
            # The state follows the clock; an expired entry holds its blocks until the next
            # round.
            now = snapshot["clock"]
            live = "hot" if now < entry["hot_until"] else "warm"
            assert entry["state"] == ("expired" if now >= entry["warm_until"] else live), entry
        holders.update(entry["blocks"])
        cache_held.update(entry["blocks"])
        for position, token in enumerate(entry["tokens"]):
            claims[(entry["blocks"][position // size], position % size)].add(token)
    for (block, offset), tokens in claims.items():
        assert len(tokens) == 1, f"holders of block {block} disagree at offset {offset}: {tokens}"

    free = retained = shared = 0
    for block in pool["blocks"]:
        count = holders.get(block["id"], 0)
        assert block["refcount"] == count, (
            f"block {block['id']}: refcount {block['refcount']} but {count} holders"
        )
        state = block["state"]
        if state in FREE_STATES:
            free += 1
            assert count == 0, f"free block {block['id']} is held"
        elif block["id"] in request_held:
            assert state == ("shared" if count > 1 else "committed"), block
        elif block["id"] in cache_held:
            assert state == "cached", block
        else:
            assert state == "retained" and count == 0, block
            retained += 1
        shared += state == "shared"
    assert free == blocks["free"], (free, blocks)
    assert retained == blocks["retained"], (retained, blocks)
    assert shared == blocks["shared"], (shared, blocks)
    assert blocks["cached"] == len(cache_held - request_held), blocks
    assert blocks["held"] == len(request_held), blocks

    queue = snapshot["queue"]
    unfinished = {v["id"] for v in snapshot["requests"] if v["status"] != "finished"}
    assert len(queue) == len(set(queue)), f"duplicate ids in the queue: {queue}"
    assert set(queue) == unfinished, f"queue {queue} vs unfinished {sorted(unfinished)}"
    counts = snapshot["metrics"]["requests"]
    statuses = Counter(v["status"] for v in snapshot["requests"])
    assert {k: counts[k] for k in ("queued", "running", "finished")} == {
        k: statuses[k] for k in ("queued", "running", "finished")
    }
    for view in snapshot["requests"]:
        # Views of finished requests are kept between snapshots: they must still be true.
        if view["status"] == "finished":
            result = engine.result(view["id"])
            assert view["generated"] == list(result.tokens), view["id"]
            assert view["finish_reason"] == result.finish_reason, view["id"]
            assert (view["accepted"], view["proposed"]) == (
                result.accepted_drafts,
                result.proposed_drafts,
            )
        commit = view["last_commit"]
        this_round = commit is not None and commit["round"] == snapshot["tick"]
        assert view["dropped_blocks"] == (list(commit["dropped_blocks"]) if this_round else [])
    undo = snapshot["undo"]
    assert 0 <= undo["available"] <= max(undo["depth"], 0), undo
    assert undo["available"] == engine.undo_available
    assert snapshot["idle"] == engine.idle == (not queue)
    check_cache_policy(snapshot)
    return snapshot


def check_nothing_orphaned(engine: Engine) -> None:
    """Blocks kept only for undo must not outlive the undo history that needs them."""
    snapshot = engine.snapshot()
    if snapshot["undo"]["available"] == 0:
        retained = snapshot["metrics"]["blocks"]["retained"]
        assert retained == 0, f"{retained} blocks retained with no undo history left"


def drain(engine: Engine, *, max_steps: int = 400, live: bool = False) -> list[dict[str, Any]]:
    """Step until idle, checking block invariants after every round; returns all events.

    A bounded loop: an engine that never finishes is a failure, not a hung test.
    """
    events: list[dict[str, Any]] = []
    for _ in range(max_steps):
        if engine.idle:
            return events
        events.extend(engine.step())
        check_block_invariants(engine)
        if live:
            check_live_prefixes(engine)
    assert engine.idle, f"engine still busy after {max_steps} rounds: {engine.snapshot()['queue']}"
    return events


def strip_clock(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without the fields that follow the wall clock rather than engine state."""
    copy = dict(snapshot)
    copy.pop("clock", None)
    if isinstance(snapshot["cache"], list):  # ttl entries (a radix tree has no clock)
        copy["cache"] = [{k: v for k, v in e.items() if k != "state"} for e in snapshot["cache"]]
    return copy
