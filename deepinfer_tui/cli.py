"""The deepinfer-tui command line: the debugger, and headless commands for scripts and CI.

Every command checks its input first; bad input is one line on stderr and exit status 2, never
a traceback. Output that cannot be written (a full disk) is exit status 1. `--json` prints one
JSON object whose first key is "command"; shapes:

demo      {command, scenario, scope, stages[{index, ticks[first,last]|null, clock, notes[],
           restores[], results[], speculation{verified, accepted, rejected, rolled_back_positions},
           rollbacks[], preemptions, expired, evictions, events?[]}], check, metrics}
generate  {command, seed, config, models, results[{id, prompt, tokens, finish_reason, error,
           accepted, proposed}], metrics, check|null, events?[]}
bounded   {command, length, keep, window, seed, tokens[], kept_from, source_rows,
           consumer_rows{exact, mask, compact}, mask_vs_compact_max_error, mask_compact_agree,
           bounded_vs_exact_max_error{mask, compact}, last_logits_error{mask, compact},
           next_token{exact, mask, compact}, note}
export    {command, scenario, tick, files[]}
replay    {command, trace, scenario, operations, events, frames, reproduced, divergence}
guide     {command, lang, chapters[{id, slug, title}]} or {command, id, slug, title, lang, text}

check     {passed, checked, tokens_equal, max_state_error, tolerance, requests[{id,
           tokens_equal, state_error, finish_reason}]}
events    each engine event dict plus "text", its describe() line
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

import numpy as np

from engine import EngineConfig, TinyModel, check_request_id, greedy_generate

from . import __version__
from .describe import describe, error_message, format_tokens, plural
from .export import ALL_FORMATS, DEFAULT_EXPORT_DIR, WriteFailed, export_all, parse_formats
from .jsonfile import read_json
from .parsing import eos_problem, parse_tokens, shorten, shown, whole_number
from .replay import Replay, TraceError, load_trace
from .scenario import Scenario, ScenarioError, default_scenario, load_scenario, parse_scenario
from .session import Session

PROG = "deepinfer-tui"
ORACLE_TOLERANCE = 1e-10
MAX_BOUNDED_LENGTH = 4096  # full recompute is quadratic in length; keep the experiment quick
SCOPE = "real float64 NumPy arithmetic on random, untrained weights: token ids, not language"
MAX_ERROR_LINE = 1000  # characters: a message quoting a huge value must still be one line to read


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


class OutputLost(Exception):
    """Standard output could not be written (exit status 1). Not an OSError: a command's
    handler for files it was given (bad input, status 2) must not take it for one."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _GuardedOutput:
    """Standard output while the program runs: a write or flush that fails raises
    OutputLost; everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as error:
            raise OutputLost(error) from error

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as error:
            raise OutputLost(error) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and never exits by itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        option = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        if option:  # argparse takes a value starting with "-" (e.g. "-1,2") for an option
            message += f" (if its value starts with '-', write {option[1]}=VALUE)"
        raise UsageError(f"{self.prog}: {message} (see --help)")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops write errors: --help into a full disk would exit 0, printing nothing.
        if message:
            (file or sys.stderr).write(message)


# -- argument types ------------------------------------------------------------------------------


def _whole(text: str, minimum: int) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise argparse.ArgumentTypeError(f"expected a {kind} whole number, got {text!r}")
    return value


def positive(text: str) -> int:
    return _whole(text, 1)


def non_negative(text: str) -> int:
    return _whole(text, 0)


def token_list(text: str) -> list[int]:
    """ "1,2,3" (commas and/or spaces) -> [1, 2, 3]; the vocabulary is checked later."""
    try:
        return parse_tokens(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"bad token list {shown(text)}: {error}") from None


# -- engine settings shared by the app, generate and export --------------------------------------

_ENGINE_FLAGS = (
    ("seed", non_negative, "N", "model seed (the draft's: the scenario's draft seed, else N + 1)"),
    ("batch-budget", positive, "N", "positions verified per round, all requests together"),
    ("draft-width", positive, "N", "deepest draft-tree level"),
    ("branching", positive, "N", "children per expanded draft node (1 = a chain)"),
    ("block-size", positive, "N", "positions per KV block"),
    ("num-blocks", positive, "N", "blocks in the KV pool"),
    ("window", positive, "N", "local attention window of the target model"),
    (
        "keep",
        positive,
        "N",
        "bounded recovery: positions local attention sees after a restore (compact: also the "
        "only ones whose consumers run)",
    ),
    ("undo-depth", non_negative, "N", "rounds that undo can rewind (0: no undo history)"),
)


def add_engine_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    group = parser.add_argument_group("engine settings (override the scenario's)")
    for flag, kind, metavar, text in _ENGINE_FLAGS:
        group.add_argument(
            f"--{flag}", type=kind, metavar=metavar, help=text, dest=prefix + flag.replace("-", "_")
        )
    group.add_argument(
        "--recovery-mode",
        choices=("exact", "mask", "compact"),
        dest=f"{prefix}recovery_mode",
        help="exact (default) or a bounded approximation: mask or compact",
    )
    group.add_argument(
        "--greedy", action="store_true", dest=f"{prefix}greedy", help="no draft model, no drafts"
    )


def _engine_overrides(args: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
    """The engine flags as Scenario.with_overrides() keywords (their dests, less the prefix)."""
    names = [flag.replace("-", "_") for flag, *_ in _ENGINE_FLAGS] + ["recovery_mode", "greedy"]
    return {name: getattr(args, prefix + name) for name in names}


def _scenario(
    path: str | None, args: argparse.Namespace, prefix: str = "", *, events: bool = True
) -> Scenario:
    """The scenario with the command line's engine settings; `events=False` drops its events
    first (`generate` brings its own requests: the settings must not be checked against the
    file's)."""
    scenario = default_scenario() if path is None else load_scenario(path)
    if not events:
        scenario = dataclasses.replace(scenario, events=())
    return scenario.with_overrides(**_engine_overrides(args, prefix))


def _session(scenario: Scenario, where: str | None = None) -> Session:
    try:
        return Session(scenario)
    except (ValueError, KeyError) as error:
        raise UsageError(f"{where or scenario.source}: {error_message(error)}") from None


# -- shared reporting ----------------------------------------------------------------------------


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, allow_nan=False))


def _event_json(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "text": describe(event)}


def _error_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def oracle_check(session: Session) -> dict[str, Any]:
    """Every finished, non-cancelled request against greedy full recompute (no cache/drafts)."""
    engine = session.engine
    rows = []
    for view in session.snapshot()["requests"]:
        if view["status"] != "finished" or view["finish_reason"] == "cancelled":
            continue
        row: dict[str, Any] = {
            "id": view["id"],
            "finish_reason": view["finish_reason"],
            "tokens_equal": False,
            "state_error": None,
        }
        rows.append(row)
        if view["finish_reason"] == "error":
            continue  # an engine error is a failed check, whatever the tokens
        result = engine.result(view["id"])
        oracle = greedy_generate(
            engine.target, result.prompt, max_tokens=len(result.tokens), eos_id=view["eos_id"]
        )
        row["tokens_equal"] = oracle.tokens == result.tokens
        if row["tokens_equal"]:
            row["state_error"] = engine.committed_state(view["id"]).max_error(oracle.state)
    errors = [r["state_error"] for r in rows if r["state_error"] is not None]
    tokens_equal = all(r["tokens_equal"] for r in rows)
    max_error = max(errors) if errors else (0.0 if not rows else None)
    passed = tokens_equal and max_error is not None and max_error <= ORACLE_TOLERANCE
    return {
        "passed": passed,
        "checked": len(rows),
        "tokens_equal": tokens_equal,
        "max_state_error": max_error,
        "tolerance": ORACLE_TOLERANCE,
        "requests": rows,
    }


def _print_check(check: dict[str, Any], recovery_mode: str) -> None:
    print(
        f"Oracle check: {check['checked']} finished request(s) against greedy decoding with "
        "full recompute (no cache, no drafts)"
    )
    print(
        f"  tokens equal: {'yes' if check['tokens_equal'] else 'no'}, max state error: "
        f"{_error_text(check['max_state_error'])} (tolerance {ORACLE_TOLERANCE:.0e}) → "
        f"{'passed' if check['passed'] else 'FAILED'}"
    )
    for row in check["requests"]:
        if not row["tokens_equal"]:
            print(f"  {row['id']}: tokens differ from the oracle ({row['finish_reason']})")
    if recovery_mode != "exact":
        print(
            f"  note: {recovery_mode} recovery is a bounded approximation; it may differ from "
            "the oracle by design"
        )


def _result_json(session: Session, request_id: str) -> dict[str, Any]:
    result = session.engine.result(request_id)
    return {
        "id": result.request_id,
        "prompt": list(result.prompt),
        "tokens": list(result.tokens),
        "finish_reason": result.finish_reason,
        "error": result.error,
        "accepted": result.accepted_drafts,
        "proposed": result.proposed_drafts,
    }


def _result_line(result: dict[str, Any], width: int) -> str:
    line = (
        f"{result['id']:<{width}}  {result['finish_reason']:<9}  "
        f"{format_tokens(result['tokens'])}  "
        f"drafts accepted {result['accepted']} of {result['proposed']} proposed"
    )
    return line + (f"  error: {result['error']}" if result["error"] else "")


def _print_work(metrics: dict[str, Any]) -> None:
    work = metrics["work"]
    print(
        f"Work: {work['target_forwards']} target forwards, {work['encoder_rows']} encoder rows, "
        f"{work['consumer_rows']} consumer rows, {work['draft_forwards']} draft forwards, "
        f"{work['draft_rows']} draft rows (row counts, not a speed measurement)"
    )


# -- demo ----------------------------------------------------------------------------------------

_BETWEEN_ROUNDS = ("note", "queued", "rollback")


def _between_rounds(event: dict[str, Any]) -> bool:
    if event["kind"] == "finished":
        return event.get("finish_reason") == "cancelled"
    return event["kind"] in _BETWEEN_ROUNDS


def run_in_stages(session: Session) -> list[tuple[list[dict[str, Any]], float]]:
    """Run to the end; a new stage starts whenever the scenario waited for the engine to idle.

    Returns each stage's slice of the log and the clock when it began.
    """
    events = session.scenario.events
    starts = [(0, session.clock.now)]
    while session.can_step():
        pending = len(session.pending_events)
        logged = len(session.log_view())  # incremental: no full merge of the log per round
        session.step()
        applied = events[len(events) - pending : len(events) - len(session.pending_events)]
        if any(event.idle for event in applied):
            new = session.log_view()[logged:]
            cut = next((i for i, e in enumerate(new) if _between_rounds(e)), len(new))
            starts.append((logged + cut, session.clock.now))
    log = session.log()
    bounds = [index for index, _ in starts] + [len(log)]
    return [(log[bounds[i] : bounds[i + 1]], clock) for i, (_, clock) in enumerate(starts)]


def _stage_summary(
    session: Session, index: int, log: list[dict[str, Any]], clock: float, with_events: bool
) -> dict[str, Any]:
    rounds = sorted({e["tick"] for e in log if e["kind"] == "commit"})
    commits = [e for e in log if e["kind"] == "commit"]
    rejected = sum(
        node.get("verdict") == "rejected"
        for e in log
        if e["kind"] == "verify"
        for node in e.get("nodes", [])
    )
    stage: dict[str, Any] = {
        "index": index,
        "ticks": [rounds[0], rounds[-1]] if rounds else None,
        "clock": clock,
        "notes": [e["text"] for e in log if e["kind"] == "note"],
        "restores": [
            {
                key: e[key]
                for key in (
                    "request_id",
                    "cache",
                    "reused_positions",
                    "suffix_positions",
                    "encoder_rows",
                    "reason",
                )
            }
            for e in log
            if e["kind"] == "restore"
        ],
        "results": [_result_json(session, e["request_id"]) for e in log if e["kind"] == "finished"],
        "speculation": {
            "verified": sum(e["verified"] for e in commits),
            "accepted": sum(e["accepted"] for e in commits),
            "rejected": rejected,
            "rolled_back_positions": sum(e["rolled_back_positions"] for e in commits),
        },
        "rollbacks": [
            {"request_id": e["request_id"], "tick": e["tick"], "removed": e["removed"]}
            for e in log
            if e["kind"] == "rollback"
        ],
        "preemptions": sum(e["kind"] == "preempt" for e in log),
        "expired": sum(e["kind"] == "evict" and e["reason"] == "expired" for e in log),
        "evictions": sum(e["kind"] == "evict" and e["reason"] != "expired" for e in log),
    }
    if with_events:
        stage["events"] = [_event_json(e) for e in log]
    return stage


def _print_stage(stage: dict[str, Any]) -> None:
    ticks = stage["ticks"]
    rounds = f"rounds t{ticks[0]}–t{ticks[1]}" if ticks else "no rounds"
    print(f"\nStage {stage['index']} · {rounds} · clock {stage['clock']:g}s")
    for note in stage["notes"]:
        print(f"  note     {note}")
    for restore in stage["restores"]:
        print(
            f"  restore  {restore['request_id']} {restore['cache']}: reused "
            f"{restore['reused_positions']} positions, computed {restore['encoder_rows']} "
            f"({restore['reason']})"
        )
    width = max((len(r["id"]) for r in stage["results"]), default=0)
    for result in stage["results"]:
        print("  result  " + _result_line(result, width))
    spec = stage["speculation"]
    if spec["verified"]:
        print(
            f"  drafts   {plural(spec['verified'], 'draft position')} verified: "
            f"{spec['accepted']} accepted, {spec['rejected']} rejected; "
            f"{plural(spec['rolled_back_positions'], 'speculative position')} rolled back"
        )
    for rollback in stage["rollbacks"]:
        print(f"  rollback {rollback['request_id']} removed {format_tokens(rollback['removed'])}")
    if stage["preemptions"] or stage["evictions"] or stage["expired"]:
        print(
            f"  pool     {plural(stage['preemptions'], 'preemption')}, "
            f"{plural(stage['expired'], 'cache entry', 'cache entries')} expired, "
            f"{plural(stage['evictions'], 'cache entry', 'cache entries')} evicted for space"
        )
    for event in stage.get("events", []):
        print(f"    {event['text']}")


def cmd_demo(args: argparse.Namespace) -> int:
    session = _session(default_scenario())
    stages = [
        _stage_summary(session, index, log, clock, args.trace)
        for index, (log, clock) in enumerate(run_in_stages(session), start=1)
    ]
    check = oracle_check(session)
    metrics = session.engine.metrics()
    if args.json:
        _print_json(
            {
                "command": "demo",
                "scenario": session.scenario.name,
                "scope": SCOPE,
                "stages": stages,
                "check": check,
                "metrics": metrics,
            }
        )
    else:
        print(f"deepinfer-tui demo · scenario {session.scenario.name!r} · {SCOPE}")
        print(session.scenario.description)
        for stage in stages:
            _print_stage(stage)
        print()
        _print_check(check, session.engine.config.recovery_mode)
        _print_work(metrics)
    return 0 if check["passed"] else 1


# -- generate ------------------------------------------------------------------------------------

_REQUEST_FIELDS = {"prompt", "max_tokens", "eos_id", "id"}


def _read_requests(path: str) -> list[dict[str, Any]]:
    data = read_json(path, "requests file", UsageError)
    if not isinstance(data, list) or not data:
        raise UsageError(f'{path}: expected a non-empty JSON list like [{{"prompt": [1, 2, 3]}}]')
    requests = []
    for number, item in enumerate(data, start=1):
        where = f"{path}: request {number}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected an object with a prompt")
        unknown = sorted(set(item) - _REQUEST_FIELDS)
        if unknown:
            raise UsageError(f"{where}: unknown field(s) {shorten(', '.join(unknown), 200)}")
        if "prompt" not in item:
            raise UsageError(f"{where}: needs a prompt (a list of token ids)")
        prompt = item["prompt"]
        if not isinstance(prompt, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt
        ):
            raise UsageError(f"{where}: prompt must be a list of token ids, got {shown(prompt)}")
        for key in ("max_tokens", "eos_id"):
            value = item.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UsageError(f"{where}: {key} must be a whole number, got {shown(value)}")
        if "id" in item:
            try:
                check_request_id(item["id"])  # the engine's own rule, before any request runs
            except ValueError as error:
                raise UsageError(f"{where}: {error}") from None
        requests.append({"where": where, **item})
    return requests


def _generate_scenario(args: argparse.Namespace) -> Scenario:
    base = _scenario(args.scenario, args, events=False)
    if args.input is not None:
        requests = _read_requests(args.input)
    else:
        requests = [
            {"where": f"--prompt {shorten(','.join(map(str, p)), 40)}", "prompt": p}
            for p in args.prompt
        ]
    model = TinyModel(seed=base.seed, **base.model)
    config = EngineConfig.from_dict(base.config)
    pool_size = base.pool_size()
    events, ids = [], set()
    for request in requests:
        where = request.pop("where")
        max_tokens = request.get("max_tokens", args.max_tokens)
        eos_id = request.get("eos_id", args.eos)
        try:
            model.check_tokens(request["prompt"], "prompt")
        except ValueError as error:
            raise UsageError(f"{where}: {error}") from None
        if max_tokens < 0:
            raise UsageError(f"{where}: max_tokens must be non-negative, got {max_tokens}")
        problem = eos_problem(eos_id, model.vocab_size)
        if problem:
            raise UsageError(f"{where}: {problem}")
        blocks = -(-(len(request["prompt"]) + max_tokens) // config.block_size)
        if blocks > pool_size:
            raise UsageError(
                f"{where}: needs {blocks} blocks of {config.block_size} positions but the pool "
                f"has {pool_size} (raise --num-blocks or lower --max-tokens)"
            )
        if request.get("id") is not None:
            if request["id"] in ids:
                raise UsageError(f"{where}: id {request['id']!r} is used twice")
            ids.add(request["id"])
        submit = {"prompt": request["prompt"], "max_tokens": max_tokens, "eos_id": eos_id}
        if request.get("id") is not None:
            submit["id"] = request["id"]
        events.append({"tick": 0, "submit": submit})
    data = {
        **base.to_dict(),
        "name": "generate",
        "description": "requests given on the command line, all submitted before round 1",
        "events": events,
    }
    return parse_scenario(data, args.input or "--prompt")


def cmd_generate(args: argparse.Namespace) -> int:
    if args.input is None and not args.prompt:
        raise UsageError(f"{PROG} generate: give --prompt 1,2,3 (repeatable) or --input FILE")
    session = _session(_generate_scenario(args), "engine settings")
    session.run()
    order = [e["request_id"] for e in session.log() if e["kind"] == "queued"]
    results = [_result_json(session, request_id) for request_id in order]
    check = oracle_check(session) if args.check else None
    metrics = session.engine.metrics()
    recovery = session.engine.config.recovery_mode
    if args.json:
        data: dict[str, Any] = {
            "command": "generate",
            "seed": session.scenario.seed,
            "config": session.engine.config.to_dict(),
            "models": session.snapshot()["models"],
            "results": results,
            "metrics": metrics,
            "check": check,
        }
        if args.trace:
            data["events"] = [_event_json(e) for e in session.log()]
        _print_json(data)
    else:
        drafting = "greedy, no draft model" if session.engine.draft is None else "speculative"
        print(f"deepinfer-tui generate · {drafting} · {recovery} recovery · {SCOPE}")
        if args.trace:
            for event in session.log():
                print(f"  {describe(event)}")
        width = max(len(r["id"]) for r in results)
        for result in results:
            print("  " + _result_line(result, width))
        if check is not None:
            _print_check(check, recovery)
        _print_work(metrics)
    failed = any(r["finish_reason"] == "error" for r in results)
    return 1 if failed or (check is not None and not check["passed"]) else 0


# -- bounded recovery experiment -----------------------------------------------------------------

BOUNDED_NOTE = (
    "mask and compact recovery are approximations: consumer layers see no local-window context "
    "older than `keep` positions, so their rows can differ from exact recovery; mask and "
    "compact agreeing with each other does not make either equal to exact"
)


def bounded_experiment(length: int, keep: int, seed: int, window: int) -> dict[str, Any]:
    """Recompute one sequence exactly and under both bounded modes, then compare the rows."""
    base = default_scenario()
    model = TinyModel(seed=seed, **{**base.model, "window": window})
    if keep < model.window:
        raise UsageError(
            f"{PROG} bounded: --keep {keep} must cover the local window ({model.window}), as the "
            "engine requires"
        )
    rng = np.random.default_rng(seed)
    tokens = tuple(int(t) for t in rng.integers(0, model.vocab_size, length))
    rows = {
        mode: model.full_forward(tokens, mode=mode, keep=keep)
        for mode in ("exact", "mask", "compact")
    }
    kept_from = max(0, length - keep)

    def kept(mode: str) -> list[np.ndarray]:
        r = rows[mode]
        return [r.local_keys[:, kept_from:], r.local_values[:, kept_from:], r.logits[kept_from:]]

    def difference(left: str, right: str) -> float:
        return max(float(np.max(np.abs(a - b))) for a, b in zip(kept(left), kept(right)))

    mask_vs_compact = difference("mask", "compact")
    return {
        "command": "bounded",
        "length": length,
        "keep": keep,
        "window": model.window,
        "seed": seed,
        "tokens": list(tokens),
        "kept_from": kept_from,
        "source_rows": length,
        "consumer_rows": {
            "exact": length * model.depth,
            "mask": length * model.depth,
            "compact": (length - kept_from) * model.depth,
        },
        "mask_vs_compact_max_error": mask_vs_compact,
        "mask_compact_agree": mask_vs_compact <= ORACLE_TOLERANCE,
        "bounded_vs_exact_max_error": {
            "mask": difference("mask", "exact"),
            "compact": difference("compact", "exact"),
        },
        "last_logits_error": {
            mode: float(np.max(np.abs(rows[mode].logits[-1] - rows["exact"].logits[-1])))
            for mode in ("mask", "compact")
        },
        "next_token": {mode: int(np.argmax(r.logits[-1])) for mode, r in rows.items()},
        "note": BOUNDED_NOTE,
    }


def cmd_bounded(args: argparse.Namespace) -> int:
    if args.length > MAX_BOUNDED_LENGTH:
        raise UsageError(
            f"{PROG} bounded: --length {args.length} is above {MAX_BOUNDED_LENGTH} (a full "
            "recompute is quadratic in length)"
        )
    result = bounded_experiment(args.length, args.keep, args.seed, args.window)
    if args.json:
        _print_json(result)
        return 0
    errors, rows = result["bounded_vs_exact_max_error"], result["consumer_rows"]
    last, nxt = result["last_logits_error"], result["next_token"]
    print(
        f"Bounded recovery experiment · {result['length']} tokens, keep {result['keep']}, "
        f"window {result['window']}, seed {result['seed']} · {SCOPE}"
    )
    print(
        f"Kept positions: {result['kept_from']}–{result['length'] - 1}; encoder/source rows: "
        f"{result['source_rows']} in every mode"
    )
    print(f"  {'mode':<8} {'consumer rows':>13}  {'error vs exact':>14}  {'last logits':>11}  next")
    print(f"  {'exact':<8} {rows['exact']:>13}  {'(reference)':>14}  {'':>11}  {nxt['exact']}")
    for mode in ("mask", "compact"):
        print(
            f"  {mode:<8} {rows[mode]:>13}  {_error_text(errors[mode]):>14}  "
            f"{_error_text(last[mode]):>11}  {nxt[mode]}"
        )
    print("  (error vs exact: largest difference over the kept rows' local K/V and logits)")
    agree = "agree" if result["mask_compact_agree"] else "DISAGREE"
    print(
        f"mask vs compact on the kept rows: max difference "
        f"{_error_text(result['mask_vs_compact_max_error'])} ({agree})"
    )
    print(f"Note: {BOUNDED_NOTE}.")
    return 0


# -- export --------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    try:
        formats = parse_formats(args.format)
    except ValueError as error:
        raise UsageError(f"{PROG} export: --format: {error}") from None
    session = _session(_scenario(args.scenario, args))
    steps = 0
    while session.can_step() and (args.steps is None or steps < args.steps):
        session.step()
        steps += 1
    paths = export_all(session, Path(args.out), formats)
    if args.json:
        _print_json(
            {
                "command": "export",
                "scenario": session.scenario.name,
                "tick": session.engine.tick,
                "files": [str(p) for p in paths],
            }
        )
    else:
        print(f"Exported scenario {session.scenario.name!r} at tick {session.engine.tick}:")
        for path in paths:
            print(f"  {path}")
    return 0


# -- replay --------------------------------------------------------------------------------------


def _interactive() -> bool:
    # Either stream is None when the program starts with it closed (`<&-`).
    streams = (sys.stdin, sys.stdout)
    return all(stream is not None and stream.isatty() for stream in streams)


def cmd_replay(args: argparse.Namespace) -> int:
    viewing = not args.check and not args.json and _interactive()
    replay = Replay(load_trace(args.trace), frames=viewing)  # a check needs no frames
    if viewing:
        return _run_app(replay.session, export_dir=DEFAULT_EXPORT_DIR, replay=replay)
    recorded = len(replay.trace.events)
    if args.json:
        _print_json(
            {
                "command": "replay",
                "trace": args.trace,
                "scenario": replay.trace.scenario.name,
                "operations": len(replay.trace.operations),
                "events": recorded,
                "frames": replay.executed + 1,  # the start and one per operation re-executed
                "reproduced": replay.reproduced,
                "divergence": replay.divergence,
            }
        )
    else:
        print(
            f"{args.trace}: scenario {replay.trace.scenario.name!r}, "
            f"{len(replay.trace.operations)} operations, {recorded} recorded events"
        )
        if replay.reproduced:
            print(
                f"Re-execution reproduced every recorded event ({recorded} events, "
                f"tick {replay.session.engine.tick})."
            )
        else:
            print(f"Re-execution DIVERGED: {replay.divergence}")
    return 0 if replay.reproduced else 1


# -- guide ---------------------------------------------------------------------------------------


def cmd_guide(args: argparse.Namespace) -> int:
    try:
        from . import guide
    except ImportError:
        print(f"{PROG} guide: the walkthrough chapters are not part of this build", file=sys.stderr)
        return 1
    if args.list:
        chapters = guide.list_chapters(args.lang)
        if args.json:
            _print_json(
                {
                    "command": "guide",
                    "lang": args.lang,
                    "chapters": [{"id": c.id, "slug": c.slug, "title": c.title} for c in chapters],
                }
            )
        else:
            for chapter in chapters:
                print(f"{chapter.id}  {chapter.title}")
            first = chapters[0].id if chapters else "01"
            print(f"\nRead one with: {PROG} guide {first} --lang {args.lang}")
        return 0
    try:  # no chapter: the index, which orients a reader and names every chapter
        chapter = guide.read_chapter(args.chapter or "00", args.lang)
    except (KeyError, ValueError) as error:
        raise UsageError(f"{PROG} guide: {error_message(error)}") from None
    if args.json:
        _print_json({"command": "guide", **dataclasses.asdict(chapter)})
    else:
        print(chapter.text, end="" if chapter.text.endswith("\n") else "\n")
    return 0


# -- the app -------------------------------------------------------------------------------------


def _run_app(session: Session, *, export_dir: Path, replay: Replay | None = None) -> int:
    if not _interactive():
        raise UsageError(
            f"{PROG}: the debugger needs an interactive terminal; for headless use try "
            f"'{PROG} demo', '{PROG} export' or '{PROG} replay TRACE --check'"
        )
    try:
        from .app import DebuggerApp
    except ImportError as error:
        print(f"{PROG}: the debugger app cannot start: {error_message(error)}", file=sys.stderr)
        return 1
    app = DebuggerApp(session, export_dir=export_dir, replay=replay)
    app.run()
    return int(app.return_code or 0)


def cmd_launch(args: argparse.Namespace) -> int:
    export_dir = Path(args.app_export_dir or DEFAULT_EXPORT_DIR)
    if args.app_trace is not None:
        # `is`, not `in`: 0 == False, and --seed 0 or --undo-depth 0 is a setting too.
        chosen = [
            k
            for k, v in _engine_overrides(args, "app_").items()
            if v is not None and v is not False
        ]
        if args.app_scenario is not None or chosen:
            raise UsageError(
                f"{PROG}: --trace replays a saved trace exactly as recorded; it cannot be "
                "combined with --scenario or engine settings"
            )
        replay = Replay(load_trace(args.app_trace))
        return _run_app(replay.session, export_dir=export_dir, replay=replay)
    session = _session(_scenario(args.app_scenario, args, "app_"))
    return _run_app(session, export_dir=export_dir)


# -- the parser ----------------------------------------------------------------------------------

_DESCRIPTION = """\
A terminal visual debugger for a speculative, prefix-caching NumPy inference engine.

Without a command it opens the debugger on the built-in scenario (or --scenario FILE): press
space to step a round, c to cancel, b to roll back, u to undo, e to export, ? for help.
The commands below run headless, for scripts and CI."""

_EPILOG = f"""\
examples:
  {PROG}                                   open the debugger on the built-in scenario
  {PROG} --scenario my.json --greedy       another scenario, without drafts
  {PROG} demo --trace                      the whole scenario, stage by stage, checked
  {PROG} generate --prompt 1,2,3 --prompt 4,5,6 --max-tokens 6 --batch-budget 4 --json
  {PROG} bounded --length 32 --keep 8      bounded recovery experiment (approximations)
  {PROG} export --steps 5                  trace snapshot files at tick 5, in {DEFAULT_EXPORT_DIR}/
  {PROG} replay {DEFAULT_EXPORT_DIR}/default-t0005.trace.json --check
  {PROG} guide --list --lang zh

Bad input exits with status 2 and one line on stderr; a failed check exits with 1, and so
do output that cannot be written and an internal error (a bug: set DEEPINFER_TUI_TRACEBACK=1
to see its traceback).
Every --json output is one object whose "command" key names the command."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument(
        "--scenario",
        metavar="FILE",
        dest="app_scenario",
        help="scenario JSON file to debug (default: the built-in scenario)",
    )
    parser.add_argument(
        "--export-dir",
        metavar="DIR",
        dest="app_export_dir",  # None when not given: a command after it must not ignore it
        help=f"folder the e key exports into (default: ./{DEFAULT_EXPORT_DIR}/)",
    )
    parser.add_argument(
        "--trace",
        metavar="TRACE.json",
        dest="app_trace",
        help="open a saved JSON trace read-only, to step through it forwards and backwards",
    )
    add_engine_options(parser, prefix="app_")
    parser.set_defaults(handler=cmd_launch, command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def command(
        name: str, summary: str, handler: Callable[[argparse.Namespace], int], details: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=f"{summary}\n\n{details}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler, command=name)
        return sub

    demo = command(
        "demo",
        "run the built-in scenario to the end and check it against the greedy oracle",
        cmd_demo,
        "Prints, stage by stage, the restores (hot/warm/cold and reused positions), results,\n"
        "draft rejections and rollbacks, and scenario notes; then compares every finished,\n"
        "non-cancelled request with greedy decoding by full recompute: tokens equal, and the\n"
        "largest difference of the committed state (tolerance 1e-10). Exit 1 if that fails.\n\n"
        "JSON: {command, scenario, scope, stages[{index, ticks, clock, notes, restores,\n"
        "results, speculation, rollbacks, preemptions, expired, evictions, events?}],\n"
        "check{passed, checked, tokens_equal, max_state_error, tolerance, requests}, metrics}",
    )
    demo.add_argument("--trace", action="store_true", help="also print every engine event")
    demo.add_argument("--json", action="store_true", help="print one JSON object instead")

    generate = command(
        "generate",
        "run a batch of prompts through the engine and print the results",
        cmd_generate,
        "Token ids in, token ids out (the weights are random and untrained). All requests are\n"
        "submitted before round 1 and run to the end.\n"
        "--input FILE: a JSON list of {prompt: [ids], max_tokens?, eos_id?, id?}.\n\n"
        "JSON: {command, seed, config, models, results[{id, prompt, tokens, finish_reason,\n"
        "error, accepted, proposed}], metrics, check (with --check, else null), events?}\n"
        "Exit 1 if a request failed or the --check oracle comparison failed.",
    )
    source = generate.add_mutually_exclusive_group()
    source.add_argument(
        "--prompt",
        type=token_list,
        action="append",
        metavar="IDS",
        help="comma-separated token ids, e.g. 1,2,3; repeat for a batch",
    )
    source.add_argument("--input", metavar="FILE", help="JSON list of requests")
    generate.add_argument(
        "--max-tokens", type=non_negative, default=8, metavar="N", help="new tokens (default 8)"
    )
    generate.add_argument(
        "--eos", "--eos-id", type=non_negative, metavar="ID", help="stop at this token id"
    )
    generate.add_argument(
        "--scenario", metavar="FILE", help="take models and config from this scenario file"
    )
    generate.add_argument(
        "--check", action="store_true", help="compare every result with the greedy oracle"
    )
    generate.add_argument("--trace", action="store_true", help="also print every engine event")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead")
    add_engine_options(generate)

    bounded = command(
        "bounded",
        "bounded-recovery experiment: mask vs compact vs exact on one sequence",
        cmd_bounded,
        "Recomputes one random token sequence exactly and with the two bounded recovery modes\n"
        "(TinyModel.full_forward mode=mask|compact, keep=N), then reports how many consumer rows\n"
        "each computes, whether mask and compact agree on the kept rows, and how far each is\n"
        "from exact. Bounded modes are approximations and can change the output.\n\n"
        "JSON: {command, length, keep, window, seed, tokens, kept_from, source_rows,\n"
        "consumer_rows{exact, mask, compact}, mask_vs_compact_max_error, mask_compact_agree,\n"
        "bounded_vs_exact_max_error{mask, compact}, last_logits_error{mask, compact},\n"
        "next_token{exact, mask, compact}, note}",
    )
    bounded.add_argument(
        "--length", type=positive, default=32, metavar="N", help="sequence length (default 32)"
    )
    bounded.add_argument(
        "--keep",
        type=positive,
        default=8,
        metavar="N",
        help="positions kept by bounded recovery (default 8)",
    )
    bounded.add_argument(
        "--seed", type=non_negative, default=7, metavar="N", help="model and token seed (default 7)"
    )
    bounded.add_argument(
        "--window", type=positive, default=4, metavar="N", help="local attention window (default 4)"
    )
    bounded.add_argument("--json", action="store_true", help="print one JSON object instead")

    export = command(
        "export",
        "step a scenario and write trace-snapshot files",
        cmd_export,
        "Writes, named by scenario and tick (e.g. default-t0005.*): the trace-snapshot document\n"
        "as .svg, .html and .txt (every request, block map, draft tree and the whole commit\n"
        "log), the replayable JSON trace (.trace.json) and a Chrome trace-event file\n"
        "(.perfetto.json) for ui.perfetto.dev or chrome://tracing. Files appear whole or not\n"
        "at all.\n\nJSON: {command, scenario, tick, files[]}",
    )
    export.add_argument("--scenario", metavar="FILE", help="scenario file (default: built-in)")
    export.add_argument(
        "--steps", type=non_negative, metavar="N", help="rounds to run first (default: to the end)"
    )
    export.add_argument(
        "--out",
        metavar="DIR",
        default=str(DEFAULT_EXPORT_DIR),
        help=f"output folder, created if missing (default: ./{DEFAULT_EXPORT_DIR}/)",
    )
    export.add_argument(
        "--format",
        default=",".join(ALL_FORMATS),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(ALL_FORMATS)} (default: all)",
    )
    export.add_argument("--json", action="store_true", help="print one JSON object instead")
    add_engine_options(export)

    replay = command(
        "replay",
        "re-execute a saved JSON trace and check it reproduces the recorded events",
        cmd_replay,
        "In a terminal (without --check/--json) it opens the debugger read-only on the trace,\n"
        "to step through it forwards and backwards. Otherwise it reports whether re-execution\n"
        "reproduced every recorded event, or the first divergence. Exit 1 on divergence.\n\n"
        "JSON: {command, trace, scenario, operations, events, frames, reproduced, divergence}",
    )
    replay.add_argument("trace", metavar="TRACE.json", help="a .trace.json file from an export")
    replay.add_argument(
        "--check", action="store_true", help="only check the re-execution (no debugger)"
    )
    replay.add_argument("--json", action="store_true", help="print one JSON object instead")

    guide = command(
        "guide",
        "read the walkthrough chapters offline (English or Chinese)",
        cmd_guide,
        "Prints a chapter's Markdown, or the list of chapters.\n\n"
        "JSON: {command, lang, chapters[{id, slug, title}]} for --list,\n"
        "      {command, id, slug, title, lang, text} for one chapter",
    )
    guide.add_argument(
        "chapter",
        nargs="?",
        metavar="CHAPTER",
        help="chapter number, e.g. 03 (default: 00, the index)",
    )
    guide.add_argument("--list", action="store_true", help="list the chapters")
    guide.add_argument("--lang", default="en", metavar="LANG", help="en (default) or zh")
    guide.add_argument("--json", action="store_true", help="print one JSON object instead")
    return parser


def main(argv: list[str] | None = None) -> int:
    if sys.stdout is None:  # started with `>&-`: print() would drop everything silently
        return _fail("standard output is closed, so nothing could be printed")
    stdout = sys.stdout
    sys.stdout = cast(TextIO, _GuardedOutput(stdout))
    try:
        code = _main(argv)  # --help and --version print while the arguments are parsed
        sys.stdout.flush()  # output lost to a full disk is a failure, not a silent success
    except OutputLost as lost:
        _silence_stdout(stdout)
        if not isinstance(lost.error, BrokenPipeError):  # the reader left (`| head`): quiet
            reason = lost.error.strerror or lost.error
            print(f"{PROG}: cannot write the output ({reason})", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout
    return code


def _silence_stdout(stdout: TextIO) -> None:
    """Point stdout at the null device, so the exit's final flush of what could not be
    written does not complain too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
    except (OSError, ValueError):  # not a file descriptor (e.g. a StringIO): nothing to do
        pass


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        return _fail(str(error))
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
    if args.command is not None:
        misplaced = _app_options_given(parser, args)
        if misplaced:
            return _fail(_misplaced_message(parser, args.command, misplaced))
    where = PROG if args.command is None else f"{PROG} {args.command}"
    try:
        return int(args.handler(args))
    except OutputLost:  # main() reports it: not bad input, and not a bug
        raise
    except KeyboardInterrupt:
        return 130
    except MemoryError as error:  # e.g. a pool of a billion blocks: NumPy names the size
        return _fail(f"not enough memory for these settings ({error_message(error)})", where)
    except WriteFailed as error:  # the files, not the input: as for standard output
        return _fail(error_message(error), where, status=1)
    except (UsageError, ScenarioError, TraceError, ValueError, OSError) as error:
        return _fail(error_message(error), where)
    except Exception as error:
        if os.environ.get("DEEPINFER_TUI_TRACEBACK"):
            raise
        print(
            f"{where}: internal error: {type(error).__name__}: {error_message(error)} "
            "(a bug; rerun with DEEPINFER_TUI_TRACEBACK=1 to see where, and please report it)",
            file=sys.stderr,
        )
        return 1


def _app_options_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The app's own options (those before any command) given with a command: argparse
    accepts `deepinfer-tui --seed 3 generate`, and the command would silently ignore them."""
    return [
        action.option_strings[0]
        for action in parser._actions
        if action.dest.startswith("app_") and getattr(args, action.dest) != action.default
    ]


def _misplaced_message(parser: argparse.ArgumentParser, command: str, options: list[str]) -> str:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    accepted = subparsers.choices[command]._option_string_actions
    names = ", ".join(options)
    not_taken = [option for option in options if option not in accepted]
    if "--trace" in options and command != "replay":  # a command's --trace prints events
        return (
            f"--trace before '{command}' would be ignored; to step through a saved trace: "
            f"{PROG} --trace FILE, or {PROG} replay FILE"
        )
    if not not_taken:
        return (
            f"{names} before '{command}' would be ignored: a command's options go after it "
            f"({PROG} {command} {options[0]} ...)"
        )
    if command == "export" and "--export-dir" in not_taken:  # export's folder is its --out
        hint = f"; it writes into the folder given by --out ({PROG} export --out DIR)"
    else:
        hint = f" (see {PROG} {command} --help)"
    return (
        f"{names} before '{command}' would be ignored (options there set up the app), and "
        f"'{command}' has no {', '.join(not_taken)}{hint}"
    )


def _fail(message: str, where: str = PROG, status: int = 2) -> int:
    """One line on stderr, led by the program (and command) name; returns `status` (2: bad
    input)."""
    line = shorten(" ".join(message.split()), MAX_ERROR_LINE)
    if not line.startswith(PROG):
        line = f"{where}: {line}"
    print(line, file=sys.stderr)
    return status
