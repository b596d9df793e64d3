"""`generate`: a batch of prompts through the engine, all submitted before round 1."""

from __future__ import annotations

import argparse
from typing import Any

from engine import EngineConfig, SamplingParams, TinyModel, check_request_id

from ..describe import describe
from ..jsonfile import read_json
from ..parsing import eos_problem, shorten, shown
from ..scenario import Scenario, draft_kind, parse_scenario
from .common import (
    SCOPE,
    event_json,
    open_session,
    oracle_check,
    print_check,
    print_json,
    print_work,
    result_json,
    result_line,
    scenario_from,
)
from .exits import FAILED, OK, PROG, UsageError
from .options import (
    add_command,
    add_engine_options,
    add_json_option,
    add_scenario_option,
    add_trace_option,
    non_negative,
    token_list,
)

SUMMARY = "run a batch of prompts through the engine and print the results"
DETAILS = """\
Token ids in, token ids out (the weights are random and untrained). All requests are
submitted before round 1 and run to the end.
--input FILE: a JSON list of {prompt: [ids], max_tokens?, eos_id?, id?, priority?,
sampling?: {temperature, top_k, top_p, seed}} (a request's sampling replaces the flags').
Exit 1 if a request failed or the --check oracle comparison failed."""

_REQUEST_FIELDS = {"prompt", "max_tokens", "eos_id", "id", "priority", "sampling"}


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "generate", SUMMARY, DETAILS, run)
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--prompt",
        type=token_list,
        action="append",
        metavar="IDS",
        help="comma-separated token ids, e.g. 1,2,3; repeat for a batch",
    )
    source.add_argument("--input", metavar="FILE", help="JSON list of requests")
    parser.add_argument(
        "--max-tokens", type=non_negative, default=8, metavar="N", help="new tokens (default 8)"
    )
    parser.add_argument(
        "--eos", "--eos-id", type=non_negative, metavar="ID", help="stop at this token id"
    )
    sampling = parser.add_argument_group("sampling (default: greedy)")
    sampling.add_argument("--temperature", type=float, metavar="T", help="0: greedy")
    sampling.add_argument("--top-k", type=non_negative, metavar="K", help="0: every token")
    sampling.add_argument("--top-p", type=float, metavar="P", help="nucleus mass in (0, 1]")
    sampling.add_argument(
        "--sample-seed", type=non_negative, metavar="S", help="first request's seed (+1 each)"
    )
    add_scenario_option(parser, "take models and config from this scenario file")
    parser.add_argument(
        "--check", action="store_true", help="compare every result with the greedy oracle"
    )
    add_trace_option(parser)
    add_json_option(parser)
    add_engine_options(parser)


def run(args: argparse.Namespace) -> int:
    if args.input is None and not args.prompt:
        raise UsageError(f"{PROG} generate: give --prompt 1,2,3 (repeatable) or --input FILE")
    session = open_session(_generate_scenario(args), "engine settings")
    session.run()
    order = [e["request_id"] for e in session.log() if e["kind"] == "queued"]
    results = [result_json(session, request_id) for request_id in order]
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
            data["events"] = [event_json(e) for e in session.log()]
        print_json(data)
    else:
        drafting = {None: "greedy, no draft model", "ngram": "speculative, n-gram drafts"}.get(
            draft_kind(session.scenario.draft), "speculative"
        )
        print(f"deepinfer-tui generate · {drafting} · {recovery} recovery · {SCOPE}")
        if args.trace:
            for event in session.log():
                print(f"  {describe(event)}")
        width = max(len(r["id"]) for r in results)
        for result in results:
            print("  " + result_line(result, width))
        if check is not None:
            print_check(check, recovery)
        print_work(metrics)
    failed = any(r["finish_reason"] == "error" for r in results)
    return FAILED if failed or (check is not None and not check["passed"]) else OK


def read_requests(path: str) -> list[dict[str, Any]]:
    """A requests file's entries, each with "where" (the file and its number) for errors."""
    data = read_json(path, "requests file", UsageError)
    if not isinstance(data, list) or not data:
        raise UsageError(f'{path}: expected a non-empty JSON list like [{{"prompt": [1, 2, 3]}}]')
    return [_request(f"{path}: request {n}", item) for n, item in enumerate(data, start=1)]


def _request(where: str, item: object) -> dict[str, Any]:
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
    for key in ("max_tokens", "eos_id", "priority"):
        value = item.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"{where}: {key} must be a whole number, got {shown(value)}")
    if "id" in item:
        try:
            check_request_id(item["id"])  # the engine's own rule, before any request runs
        except ValueError as error:
            raise UsageError(f"{where}: {error}") from None
    if item.get("sampling") is not None:
        sampling = item["sampling"]
        try:
            if not isinstance(sampling, dict):
                raise ValueError(f"expected an object of sampling settings, got {shown(sampling)}")
            item = {**item, "sampling": SamplingParams.from_dict(sampling).to_dict()}
        except (TypeError, ValueError) as error:
            raise UsageError(f"{where}: sampling: {error}") from None
    return {"where": where, **item}


def _generate_scenario(args: argparse.Namespace) -> Scenario:
    base = scenario_from(args.scenario, args, events=False)
    if args.input is not None:
        requests = read_requests(args.input)
    else:
        requests = [
            {"where": f"--prompt {shorten(','.join(map(str, p)), 40)}", "prompt": p}
            for p in args.prompt
        ]
    model = TinyModel(seed=base.seed, **base.model)
    config = EngineConfig.from_dict(base.config)
    pool_size = base.pool_size()
    events, ids = [], set()
    for index, request in enumerate(requests):
        submit = _submit(request, args, model, config, pool_size, index)
        if "id" in submit:
            if submit["id"] in ids:
                raise UsageError(f"{request['where']}: id {submit['id']!r} is used twice")
            ids.add(submit["id"])
        events.append({"tick": 0, "submit": submit})
    data = {
        **base.to_dict(),
        "name": "generate",
        "description": "requests given on the command line, all submitted before round 1",
        "events": events,
    }
    return parse_scenario(data, args.input or "--prompt")


def _submit(
    request: dict[str, Any],
    args: argparse.Namespace,
    model: TinyModel,
    config: EngineConfig,
    pool_size: int,
    index: int,
) -> dict[str, Any]:
    """One request as a scenario submit, checked against the model and the pool first."""
    where = request["where"]
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
    submit = {"prompt": request["prompt"], "max_tokens": max_tokens, "eos_id": eos_id}
    sampling = request.get("sampling") or _sampling(args, where, index)
    if sampling is not None:
        submit["sampling"] = sampling
    if request.get("id") is not None:
        submit["id"] = request["id"]
    if request.get("priority"):
        submit["priority"] = request["priority"]
    return submit


def _sampling(args: argparse.Namespace, where: str, index: int) -> dict[str, Any] | None:
    """The sampling flags as a submit's sampling (None: greedy), checked by SamplingParams."""
    given = {
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": None if args.sample_seed is None else args.sample_seed + index,
    }
    given = {key: value for key, value in given.items() if value is not None}
    if not given:
        return None
    try:
        return SamplingParams(**given).to_dict()
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None
