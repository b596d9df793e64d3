"""`bounded`: mask vs compact vs exact recovery on one random sequence."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from engine import TinyModel

from ..scenario import default_scenario
from .common import ORACLE_TOLERANCE, SCOPE, error_text, print_json
from .exits import PROG, UsageError
from .options import add_command, add_json_option, non_negative, positive

SUMMARY = "bounded-recovery experiment: mask vs compact vs exact on one sequence"
DETAILS = """\
Recomputes one random token sequence exactly and with the two bounded recovery modes
(TinyModel.full_forward mode=mask|compact, keep=N), then reports how many consumer rows
each computes, whether mask and compact agree on the kept rows, and how far each is
from exact. Bounded modes are approximations and can change the output."""

MAX_BOUNDED_LENGTH = 4096  # full recompute is quadratic in length; keep the experiment quick
BOUNDED_NOTE = (
    "mask and compact recovery are approximations: consumer layers see no local-window context "
    "older than `keep` positions, so their rows can differ from exact recovery; mask and "
    "compact agreeing with each other does not make either equal to exact"
)


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "bounded", SUMMARY, DETAILS, run)
    parser.add_argument(
        "--length", type=positive, default=32, metavar="N", help="sequence length (default 32)"
    )
    parser.add_argument(
        "--keep",
        type=positive,
        default=8,
        metavar="N",
        help="positions kept by bounded recovery (default 8)",
    )
    parser.add_argument(
        "--seed", type=non_negative, default=7, metavar="N", help="model and token seed (default 7)"
    )
    parser.add_argument(
        "--window", type=positive, default=4, metavar="N", help="local attention window (default 4)"
    )
    add_json_option(parser)


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


def run(args: argparse.Namespace) -> int:
    if args.length > MAX_BOUNDED_LENGTH:
        raise UsageError(
            f"{PROG} bounded: --length {args.length} is above {MAX_BOUNDED_LENGTH} (a full "
            "recompute is quadratic in length)"
        )
    result = bounded_experiment(args.length, args.keep, args.seed, args.window)
    if args.json:
        print_json(result)
    else:
        _print_report(result)
    return 0


def _print_report(result: dict[str, Any]) -> None:
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
            f"  {mode:<8} {rows[mode]:>13}  {error_text(errors[mode]):>14}  "
            f"{error_text(last[mode]):>11}  {nxt[mode]}"
        )
    print("  (error vs exact: largest difference over the kept rows' local K/V and logits)")
    agree = "agree" if result["mask_compact_agree"] else "DISAGREE"
    print(
        f"mask vs compact on the kept rows: max difference "
        f"{error_text(result['mask_vs_compact_max_error'])} ({agree})"
    )
    print(f"Note: {BOUNDED_NOTE}.")
