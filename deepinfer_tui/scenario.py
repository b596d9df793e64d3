"""Scenarios: a small JSON file of models, config, timed requests and clock moves.

Events apply in file order. `"tick": N` applies once the engine has run N rounds (or earlier,
when it has nothing left to do); `"idle": true` waits until the engine has nothing left to do.
An event may `submit` a request, `cancel` one, move the injected `clock` to an absolute time,
and carry a `note` shown in the log. An event with none of these is a wait: the events after it
apply only once it is due.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from engine import (
    Engine,
    EngineConfig,
    NgramDrafter,
    TinyModel,
    label_problem,
    make_draft,
    pool_blocks,
)

from .jsonfile import read_json
from .parsing import eos_problem, shorten, shown
from .scenario_events import (
    Fail,
    ScenarioError,
    ScenarioEvent,
    parse_event,
)

SCHEMA = 1
Drafting = TinyModel | NgramDrafter | None  # what a scenario's draft section builds
MAX_NAME_LENGTH = 200  # characters: a title line, not a paragraph (file names are cut shorter)
MAX_PROBLEM_LENGTH = 300  # characters of one error's text: values in a file may be huge


_FIELDS = {"schema", "name", "description", "seed", "model", "draft", "config", "events"}
# A draft is an early-exit model (kind "model", the default) or the n-gram drafter.
DRAFT_FIELDS = {"model": {"kind", "depth", "noise", "seed"}, "ngram": {"kind", "min_n", "max_n"}}
DEFAULT_MODEL_DRAFT: dict[str, Any] = {"depth": 1, "noise": 0.1}
DEFAULT_NGRAM_MAX = 3  # NgramDrafter's default max_n


def draft_kind(draft: dict[str, Any] | None) -> str | None:
    """The draft's kind: "model", "ngram", or None (no drafts)."""
    return None if draft is None else str(draft.get("kind", "model"))


def build_draft(target: TinyModel, seed: int, draft: dict[str, Any] | None) -> Drafting:
    """The draft a scenario's `draft` section makes: a model, an NgramDrafter or None."""
    if draft is None:
        return None
    settings = {k: v for k, v in draft.items() if k != "kind"}
    if draft_kind(draft) == "ngram":
        return NgramDrafter(**settings)
    return make_draft(target, **{"seed": seed + 1, **settings})


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    seed: int = 7
    model: dict[str, int] = field(default_factory=dict)
    draft: dict[str, Any] | None = field(default_factory=lambda: dict(DEFAULT_MODEL_DRAFT))
    config: dict[str, Any] = field(default_factory=dict)
    events: tuple[ScenarioEvent, ...] = ()
    source: str = "<scenario>"

    def engine_config(self) -> EngineConfig:
        return EngineConfig.from_dict(self.config)

    def build_models(self) -> tuple[TinyModel, Drafting]:
        """The target and the draft: a model, an NgramDrafter, or None (no drafts)."""
        target = TinyModel(seed=self.seed, **self.model)
        return target, build_draft(target, self.seed, self.draft)

    def pool_size(self) -> int:
        """Blocks in the pool of the engine this scenario builds."""
        target, draft = self.build_models()
        return pool_blocks(self.engine_config(), target, _stored(draft))

    def build_engine(self, clock: Any) -> Engine:
        target, draft = self.build_models()
        return Engine(target, draft, config=self.engine_config(), clock=clock)

    def with_overrides(
        self,
        *,
        seed: int | None = None,
        batch_budget: int | None = None,
        draft_width: int | None = None,
        branching: int | None = None,
        block_size: int | None = None,
        num_blocks: int | None = None,
        window: int | None = None,
        recovery_mode: str | None = None,
        keep: int | None = None,
        undo_depth: int | None = None,
        token_budget: int | str | None = None,
        long_prefill_threshold: int | None = None,
        schedule_policy: str | None = None,
        cache_policy: str | None = None,
        greedy: bool = False,
        draft: str | None = None,
        ngram_min: int | None = None,
        ngram_max: int | None = None,
        no_fast_paths: bool = False,
    ) -> Scenario:
        """A copy with command-line settings applied, validated like a file would be; `draft`
        is "model" (the scenario's draft model, else the default) or "ngram" (`ngram_*`)."""
        config = dict(self.config)
        for key, value in (
            ("max_batch_tokens", batch_budget),
            ("draft_width", draft_width),
            ("draft_branching", branching),
            ("block_size", block_size),
            ("num_blocks", num_blocks),
            ("recovery_mode", recovery_mode),
            ("keep", keep),
            ("undo_depth", undo_depth),
            ("long_prefill_threshold", long_prefill_threshold),
            ("schedule_policy", schedule_policy),
            ("cache_policy", cache_policy),
        ):
            if value is not None:
                config[key] = value
        if token_budget is not None:  # "none": no limit
            config["token_budget"] = None if token_budget == "none" else token_budget
        if no_fast_paths:
            config["fast_paths"] = False
        if batch_budget is not None and config.get("cost_curve"):
            config["cost_curve"] = [p for p in config["cost_curve"] if p[0] <= batch_budget]
            if not config["cost_curve"]:
                config["cost_curve"] = None
        model = dict(self.model)
        if window is not None:
            model["window"] = window
        updated = replace(
            self,
            seed=self.seed if seed is None else seed,
            config=config,
            model=model,
            draft=self._draft_with(draft, ngram_min, ngram_max, greedy),
        )
        return parse_scenario(updated.to_dict(), self.source)

    def _draft_with(
        self, kind: str | None, ngram_min: int | None, ngram_max: int | None, greedy: bool
    ) -> dict[str, Any] | None:
        """The draft section with the command line's draft settings applied (None: greedy,
        which n-gram sizes contradict)."""
        kind = None if greedy else kind or draft_kind(self.draft)
        if kind == "model":
            keep = draft_kind(self.draft) == "model"
            drafted = dict(self.draft) if keep and self.draft else dict(DEFAULT_MODEL_DRAFT)
        elif kind == "ngram":
            drafted = dict(self.draft) if draft_kind(self.draft) == "ngram" else {"kind": "ngram"}
        else:
            drafted = None
        if ngram_min is None and ngram_max is None:
            return drafted
        if kind != "ngram" or drafted is None:
            raise ValueError("--ngram-min and --ngram-max size an n-gram draft: add --draft ngram")
        if ngram_min is not None:
            drafted["min_n"] = ngram_min
        if ngram_max is not None:
            drafted["max_n"] = ngram_max
        elif "max_n" not in drafted:  # a larger minimum raises the default maximum with it
            drafted["max_n"] = max(DEFAULT_NGRAM_MAX, drafted["min_n"])
        return drafted

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "model": dict(self.model),
            "draft": None if self.draft is None else dict(self.draft),
            "config": dict(self.config),
            "events": [event.to_dict() for event in self.events],
        }


def default_scenario() -> Scenario:
    text = resources.files("deepinfer_tui").joinpath("scenarios/default.json").read_text()
    return parse_scenario(json.loads(text), "default scenario")


def load_scenario(path: str | Path) -> Scenario:
    data = read_json(path, "scenario", ScenarioError)
    return parse_scenario(data, str(path))


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate a scenario document completely (models and config are built once)."""

    def fail(where: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{source}: {where}: {shorten(problem, MAX_PROBLEM_LENGTH)}")

    scenario = _read_fields(data, source, fail)
    target, block_size, num_blocks = _build_pool(scenario, fail)
    events = _resolve_requests(scenario.events, target, block_size, num_blocks, fail)
    return replace(scenario, events=events)


def _read_fields(data: Any, source: str, fail: Fail) -> Scenario:
    """Every field checked on its own; the events parsed, their requests not yet resolved."""
    if not isinstance(data, dict):
        raise fail("top level", "must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise fail("top level", f"unknown field(s) {', '.join(unknown)}")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise fail(
            "schema", f"version {shown(data.get('schema'))} is not supported (expected {SCHEMA})"
        )
    name = _scenario_name(data, source, fail)
    description = data.get("description")
    if description is None:  # left out, or null: none
        description = ""
    if not isinstance(description, str):
        raise fail("description", f"must be a string, got {shown(description)}")
    seed = data.get("seed", 7)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise fail("seed", f"must be a non-negative integer, got {shown(seed)}")
    model = data.get("model", {})
    if not isinstance(model, dict) or set(model) - {"vocab_size", "width", "depth", "window"}:
        raise fail("model", "must be an object with vocab_size, width, depth and/or window")
    draft = data.get("draft", DEFAULT_MODEL_DRAFT)
    if draft is not None:
        _check_draft_fields(draft, fail)
    config = data.get("config", {})
    if not isinstance(config, dict):
        raise fail("config", "must be an object of engine settings")
    raw_events = data.get("events", [])
    if not isinstance(raw_events, list):
        raise fail("events", "must be a list")
    return Scenario(
        name=name,
        description=description,
        seed=seed,
        model=dict(model),
        draft=None if draft is None else dict(draft),
        config=dict(config),
        events=tuple(parse_event(e, i, fail) for i, e in enumerate(raw_events)),
        source=source,
    )


def _check_draft_fields(draft: Any, fail: Fail) -> None:
    """null, a draft model's {depth, noise, seed} or {"kind": "ngram", min_n, max_n}."""
    if not isinstance(draft, dict):
        raise fail(
            "draft",
            'must be null, an object with depth, noise and/or seed, or {"kind": "ngram", '
            '"min_n": 2, "max_n": 3}',
        )
    kind = draft.get("kind", "model")
    if not isinstance(kind, str) or kind not in DRAFT_FIELDS:
        raise fail("draft.kind", f'must be "model" or "ngram", got {shown(kind)}')
    unknown = sorted(set(draft) - DRAFT_FIELDS[kind])
    if unknown:
        known = ", ".join(sorted(DRAFT_FIELDS[kind] - {"kind"}))
        raise fail(
            "draft", f"unknown field(s) {', '.join(unknown)} for a draft of kind {kind} ({known})"
        )


def _scenario_name(data: dict[str, Any], source: str, fail: Fail) -> str:
    """The "name" field, else the file's name cut to length: a long file name must not make
    the file unusable."""
    name = data["name"] if "name" in data else Path(source).stem[:MAX_NAME_LENGTH]
    problem = name_problem(name)
    if problem and "name" not in data:
        problem = f"taken from the file's name, which {problem}; give the scenario a name"
    if problem:
        raise fail("name", problem)
    return name


def _build_pool(scenario: Scenario, fail: Fail) -> tuple[TinyModel, int, int]:
    """The target model, the block size and the pool's blocks, each section built on its own
    so that an error names the one that holds the bad setting."""
    try:
        target = TinyModel(seed=scenario.seed, **scenario.model)
    except (TypeError, ValueError) as error:
        raise fail("model", str(error)) from None
    try:
        draft = build_draft(target, scenario.seed, scenario.draft)
    except (TypeError, ValueError) as error:
        raise fail("draft", str(error)) from None
    try:
        engine_config = scenario.engine_config()
    except (TypeError, ValueError) as error:
        raise fail("config", str(error)) from None
    num_blocks = pool_blocks(engine_config, target, _stored(draft))
    return target, engine_config.block_size, num_blocks


def _stored(draft: Drafting) -> TinyModel | None:
    """The draft model whose rows the pool may store (an n-gram draft stores none)."""
    return draft if isinstance(draft, TinyModel) else None


def _resolve_requests(
    events: tuple[ScenarioEvent, ...],
    target: TinyModel,
    block_size: int,
    num_blocks: int,
    fail: Fail,
) -> tuple[ScenarioEvent, ...]:
    """Every submit checked against the models and the pool and given its request id; every
    cancel names an earlier submit."""
    explicit = {e.submit["id"] for e in events if e.submit and e.submit.get("id")}
    ids: dict[str, int] = {}  # request id -> index of the event that submits it
    resolved = []
    for index, event in enumerate(events):
        if event.submit is not None:
            where = f"events[{index}].submit"
            _check_submit_fits(event.submit, where, target, block_size, num_blocks, fail)
            request_id = _request_id(event.submit, where, ids, explicit, fail)
            ids[request_id] = index
            event = replace(event, request_id=request_id)
        if event.cancel is not None and event.cancel not in ids:
            raise fail(f"events[{index}].cancel", f"no earlier submit has id {shown(event.cancel)}")
        resolved.append(event)
    return tuple(resolved)


def _check_submit_fits(
    submit: dict[str, Any],
    where: str,
    target: TinyModel,
    block_size: int,
    num_blocks: int,
    fail: Fail,
) -> None:
    """The prompt and eos id are tokens of the target, and the request fits in the pool."""
    try:
        tokens = target.check_tokens(submit["prompt"], "prompt")
    except ValueError as error:
        raise fail(where, str(error)) from None
    problem = eos_problem(submit.get("eos_id"), target.vocab_size)
    if problem:
        raise fail(f"{where}.eos_id", problem)
    needed = -(-(len(tokens) + submit["max_tokens"]) // block_size)
    if needed > num_blocks:
        raise fail(where, f"needs {needed} blocks but the pool has {num_blocks}")


def _request_id(
    submit: dict[str, Any], where: str, ids: dict[str, int], explicit: set[str], fail: Fail
) -> str:
    """The submit's own id (not taken by an earlier one), else request-N, clear of every id
    the scenario names."""
    request_id = submit.get("id")
    if request_id is None:
        number = len(ids) + 1
        while f"request-{number}" in ids or f"request-{number}" in explicit:
            number += 1
        return f"request-{number}"
    if request_id in ids:
        raise fail(f"{where}.id", f"{request_id!r} is already the id of events[{ids[request_id]}]")
    return request_id


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a scenario's name (None if it can): the request ids' rule (a
    non-empty printable string), at most MAX_NAME_LENGTH characters."""
    return label_problem(name, MAX_NAME_LENGTH)
