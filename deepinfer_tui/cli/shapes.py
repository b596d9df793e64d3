"""The JSON each command prints with --json, defined once as plain data.

The help texts and docs/cli.md are written from these shapes, and the tests check every
command's real output against them. A shape is a dict from field to description; a field's
name may end in `[]` (a list), `|null` (may be null) and `?` (present only with a flag); a dict
value is a nested object (with `[]`: a list of them), whose "" entry describes the object
itself and whose "..." entry stands for further fields of its own.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

Shape = dict[str, Any]

_EVENT: Shape = {
    "": "an engine event, as in an exported trace",
    "tick": "the round it happened in",
    "kind": "queued, restore, budget, verify, commit, rollback, finished, ...",
    "request_id|null": "the request it concerns, if any",
    "text": "the event as one line, as the debugger's log shows it",
    "...": "the event's own fields",
}

_RESULT: Shape = {
    "": "one per request",
    "id": "the request id",
    "prompt[]": "the prompt's token ids",
    "tokens[]": "the new token ids",
    "finish_reason": "stop (EOS), length (max tokens), cancelled or error",
    "error|null": "the engine's error message, when finish_reason is error",
    "accepted": "draft tokens accepted",
    "proposed": "draft tokens proposed",
}

_CHECK: Shape = {
    "": "every finished, non-cancelled request against its oracle by full recompute (greedy, "
    "or sampled with the request's seed)",
    "passed": "tokens equal and max_state_error within tolerance",
    "checked": "how many requests were compared",
    "tokens_equal": "every request's tokens equal the oracle's",
    "max_state_error|null": "largest difference of committed state (null if none compared)",
    "tolerance": "1e-10",
    "requests[]": {
        "": "one per request compared",
        "id": "the request id",
        "tokens_equal": "its tokens equal the oracle's",
        "state_error|null": "its committed state's largest difference (null if tokens differ)",
        "finish_reason": "as in the results",
    },
}

_METRICS = "the engine's counters: blocks, cache restores, drafts, work rows, requests"

_DEMO: Shape = {
    "command": '"demo"',
    "scenario": "the scenario's name",
    "scope": "what the numbers are: random, untrained weights, so token ids, not language",
    "stages[]": {
        "": "a new stage starts whenever the scenario waits for the engine to go idle",
        "index": "1, 2, ...",
        "ticks[]|null": "[first, last] round of the stage; null if it ran none",
        "clock": "the scenario clock (seconds) when the stage began",
        "notes[]": "the scenario's notes",
        "restores[]": {
            "": "one per admission: how much state was reused",
            "request_id": "the request",
            "cache": "hot, warm or cold",
            "reused_positions": "positions taken from the cache",
            "suffix_positions": "positions left to compute",
            "encoder_rows": "encoder rows computed",
            "reason": "why this kind of restore",
        },
        "results[]": _RESULT,
        "speculation": {
            "": "the stage's draft verification",
            "verified": "draft positions verified",
            "accepted": "of those, accepted",
            "rejected": "draft-tree nodes rejected",
            "rolled_back_positions": "speculative positions rolled back",
        },
        "rollbacks[]": {
            "": "one per rollback",
            "request_id": "the request",
            "tick": "the round",
            "removed[]": "the token ids removed",
        },
        "preemptions": "requests preempted",
        "expired": "cache entries expired",
        "evictions": "cache entries evicted for space",
        "events[]?": _EVENT | {"": "every engine event of the stage (with --trace)"},
    },
    "check": _CHECK,
    "metrics": _METRICS,
}

_GENERATE: Shape = {
    "command": '"generate"',
    "seed": "the model seed",
    "config": "the engine configuration used (EngineConfig as a dict)",
    "models": "the target and draft models: identity, sizes, window (no draft with --greedy or "
    "--draft ngram: no draft model runs)",
    "results[]": _RESULT | {"": "one per request, in submission order"},
    "metrics": _METRICS,
    "check|null": _CHECK | {"": "the oracle comparison with --check, else null"},
    "events[]?": _EVENT | {"": "every engine event (with --trace)"},
}

_BOUNDED: Shape = {
    "command": '"bounded"',
    "length": "sequence length",
    "keep": "positions kept by bounded recovery",
    "window": "the local attention window",
    "seed": "model and token seed",
    "tokens[]": "the random sequence",
    "kept_from": "first kept position",
    "source_rows": "encoder rows, the same in every mode",
    "consumer_rows": {
        "": "consumer rows each mode computes",
        "exact": "every position",
        "mask": "every position, older context masked",
        "compact": "the kept positions only",
    },
    "mask_vs_compact_max_error": "largest difference between mask and compact on the kept rows",
    "mask_compact_agree": "that difference is within 1e-10",
    "bounded_vs_exact_max_error": {
        "": "largest difference from exact over the kept rows' local K/V and logits",
        "mask": "mask recovery",
        "compact": "compact recovery",
    },
    "last_logits_error": {
        "": "largest difference from exact of the last position's logits",
        "mask": "mask recovery",
        "compact": "compact recovery",
    },
    "next_token": {
        "": "the argmax of the last logits",
        "exact": "exact",
        "mask": "mask",
        "compact": "compact",
    },
    "note": "why bounded modes are approximations",
}

_EXPORT: Shape = {
    "command": '"export"',
    "scenario": "the scenario's name",
    "tick": "the round exported",
    "files[]": "the paths written",
}

_REPLAY: Shape = {
    "command": '"replay"',
    "trace": "the trace file",
    "scenario": "its scenario's name",
    "operations": "operations recorded (steps, cancels, rollbacks, undos, ...)",
    "events": "events recorded",
    "frames": "the start and one frame per operation re-executed",
    "reproduced": "re-execution reproduced every recorded event",
    "divergence|null": "the first difference, if any",
}

_GUIDE_LIST: Shape = {
    "command": '"guide"',
    "lang": "en or zh",
    "chapters[]": {
        "": "one per chapter",
        "id": "its number, e.g. 01",
        "slug": "its short name",
        "title": "its title",
    },
}

_GUIDE_CHAPTER: Shape = {
    "command": '"guide"',
    "id": "the chapter's number",
    "slug": "its short name",
    "title": "its title",
    "lang": "en or zh",
    "text": "the chapter's Markdown",
}

# Per command: (when, shape) for each form its output takes.
SHAPES: dict[str, tuple[tuple[str, Shape], ...]] = {
    "demo": (("", _DEMO),),
    "generate": (("", _GENERATE),),
    "bounded": (("", _BOUNDED),),
    "export": (("", _EXPORT),),
    "replay": (("", _REPLAY),),
    "guide": (("with --list", _GUIDE_LIST), ("for one chapter", _GUIDE_CHAPTER)),
}

_FIELD = re.compile(r"(?P<name>\w+)(?P<list>\[\])?(?P<null>\|null)?(?P<optional>\?)?")


def field(key: str) -> dict[str, Any]:
    """A field name's parts: name, and whether it is a list, nullable or optional."""
    match = _FIELD.fullmatch(key)
    if match is None:
        raise ValueError(f"bad field name in a JSON shape: {key!r}")
    return {
        "name": match["name"],
        "list": bool(match["list"]),
        "nullable": bool(match["null"]),
        "optional": bool(match["optional"]),
    }


def _entries(shape: Shape) -> list[tuple[str, Any]]:
    return [(key, value) for key, value in shape.items() if key not in ("", "...")]


def compact(shape: Shape) -> str:
    """One line, e.g. `{command, files[]}`: every field, nested objects in braces."""
    parts = []
    for key, value in _entries(shape):
        if isinstance(value, dict):
            inner = compact(value)
            key = key.replace("[]", f"[{inner}]") if "[]" in key else key + inner
        parts.append(key)
    if "..." in shape:
        parts.append("...")
    return "{" + ", ".join(parts) + "}"


def help_text(command: str, width: int = 88) -> str:
    """The "JSON: ..." paragraph of a command's help."""
    lines = []
    for number, (when, shape) in enumerate(SHAPES[command]):
        text = f"{'or' if number else 'JSON:'} {compact(shape)} {when}".rstrip()
        lines += textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)


def markdown(command: str) -> str:
    """The shape as a nested Markdown list, for docs/cli.md."""
    out = []
    for when, shape in SHAPES[command]:
        out.append(f"JSON{f' {when}' if when else ''}: `{compact(shape)}`")
        out.append("")
        out += _markdown_fields(shape, "")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _markdown_fields(shape: Shape, indent: str) -> list[str]:
    lines = []
    for key, value in _entries(shape):
        about = value.get("", "") if isinstance(value, dict) else value
        lines.append(f"{indent}- `{key}`: {about}")
        if isinstance(value, dict):
            lines += _markdown_fields(value, indent + "  ")
    if "..." in shape:
        lines.append(f"{indent}- `...`: {shape['...']}")
    return lines
