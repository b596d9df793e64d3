"""Ratios, the issue's performance targets (reported, never asserted), and the printed tables."""

from __future__ import annotations

import itertools
from typing import Any

from engines import MODEL_SHAPE
from environment import describe_blas

# Bytes one position of target history occupies in encoder K/V, source and shared K/V (float64).
HISTORY_BYTES_PER_POSITION = 5 * MODEL_SHAPE["width"] * 8


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _get(data: Any, *keys: Any) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


# -- ratios -----------------------------------------------------------------------------------

_THROUGHPUT = ("tokens_per_second", "rounds_per_second")


def batch_ratios(ours: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    if reference is None:
        return {}
    figures = {key: ratio(ours.get(key), reference.get(key)) for key in _THROUGHPUT}
    return {**figures, "meaning": "ours / reference (higher is better for us)"}


def long_ratios(ours: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """Reference time / our time, so >1 means we are faster, for prefill and decode per token."""
    if reference is None:
        return {}
    out: dict[str, Any] = {"meaning": "reference time / our time (higher is better for us)"}
    for mode, lengths in ours.items():
        out[mode] = {}
        for length, figures in lengths.items():
            theirs = _get(reference, mode, length) or {}
            out[mode][length] = {
                "prefill": ratio(theirs.get("prefill_seconds"), figures.get("prefill_seconds")),
                "decode_per_token": ratio(
                    theirs.get("decode_ms_per_token"), figures.get("decode_ms_per_token")
                ),
            }
    return out


# -- targets ----------------------------------------------------------------------------------


def _decode_floors(long: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The decode floor's parts (attention_ms, dense_ms, total_ms) by context length."""
    return long.get("decode_floor") or {}


def _target(name: str, goal: str, measured: float | None, passed: bool | None, detail: str) -> dict:
    status = "n/a" if passed is None else ("PASS" if passed else "FAIL")
    return {"target": name, "goal": goal, "measured": measured, "status": status, "detail": detail}


def _at_least(name: str, goal: str, value: float | None, bound: float, detail: str) -> dict:
    return _target(name, goal, value, None if value is None else value >= bound, detail)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    w = results["workloads"]
    targets = []
    targets.append(
        _at_least(
            "batch vs reference",
            ">= 50x reference committed tokens/s",
            _get(w, "batch", "ratio", "tokens_per_second"),
            50.0,
            "ours / reference, speculative, same shape",
        )
    )
    spec_gain = ratio(
        _get(w, "batch", "ours", "tokens_per_second"),
        _get(w, "batch-greedy", "ours", "tokens_per_second"),
    )
    targets.append(
        _target(
            "speculation pays",
            "batch > our batch-greedy tokens/s",
            spec_gain,
            None if spec_gain is None else spec_gain > 1.0,
            "our speculative / our greedy tokens/s",
        )
    )
    targets.append(
        _at_least(
            "batch-greedy vs reference",
            ">= 10x reference greedy tokens/s",
            _get(w, "batch-greedy", "ratio", "tokens_per_second"),
            10.0,
            "ours / reference, greedy, same shape",
        )
    )
    long_ratio = _get(w, "long", "ratio") or {}
    long_ours = _get(w, "long", "ours") or {}
    floors = _decode_floors(w.get("long") or {})
    for mode in ("greedy", "speculative"):
        for length, bound in (("2048", 20.0), ("4096", 50.0)):
            detail = "reference ms/token / our ms/token"
            theirs = _get(w, "long", "reference", mode, length, "decode_ms_per_token")
            parts = floors.get(length)
            if mode == "greedy" and parts and theirs:
                detail += (
                    f"; a step's attentions alone ({parts['attention_ms']:.3f} ms) allow at most "
                    f"{theirs / parts['attention_ms']:.1f}x, with its dense products "
                    f"({parts['total_ms']:.3f} ms) {theirs / parts['total_ms']:.1f}x"
                )
            targets.append(
                _at_least(
                    f"long {mode} decode @{length}",
                    f">= {bound:g}x lower decode time per token than reference",
                    _get(long_ratio, mode, length, "decode_per_token"),
                    bound,
                    detail,
                )
            )
        prefill = {
            length: r.get("prefill")
            for length, r in (long_ratio.get(mode) or {}).items()
            if r.get("prefill") is not None
        }
        worst = min(prefill.items(), key=lambda item: item[1]) if prefill else None
        targets.append(
            _target(
                f"long {mode} prefill",
                "no slower than reference at every length",
                worst[1] if worst else None,
                None if worst is None else worst[1] >= 1.0,
                f"worst reference/ours prefill time ratio (at {worst[0]})" if worst else "",
            )
        )
        per_token = {
            length: figures.get("decode_ms_per_token")
            for length, figures in (long_ours.get(mode) or {}).items()
        }
        scaling = ratio(per_token.get("4096"), per_token.get("256"))
        targets.append(
            _target(
                f"long {mode} scaling",
                "decode/token at 4096 <= 3x at 256",
                scaling,
                None if scaling is None else scaling <= 3.0,
                "our ms/token at 4096 / at 256",
            )
        )
    p95 = _get(w, "tui", "ours", "latency_p95_ms")
    targets.append(
        _target(
            "tui latency",
            "p95 keypress-to-refresh < 50 ms",
            p95,
            None if p95 is None else p95 < 50.0,
            "ms to the settled frame, 64 active requests, headless",
        )
    )
    p95 = _get(w, "tui-prefixes", "ours", "latency_p95_ms")
    targets.append(
        _target(
            "tui-prefixes latency",
            "p95 keypress-to-refresh < 100 ms",
            p95,
            None if p95 is None else p95 < 100.0,
            "ms to the settled frame, issue 26's 48 requests on 4 prefixes, headless",
        )
    )
    targets.extend(_memory_targets(results.get("memory") or {}))
    return targets


def _render_tui(name: str, label: str, t: dict[str, Any]) -> list[str]:
    if "error" in t:
        return ["", f"{name}: not measured: {t['error']}"]
    out = [
        "",
        f"{name}: {t['presses']} presses at {label}, keypress to settled frame: "
        f"mean {_fmt(t['latency_mean_ms'])} ms, "
        f"p50 {_fmt(t['latency_p50_ms'])} ms, p95 {_fmt(t['latency_p95_ms'])} ms, "
        f"max {_fmt(t['latency_max_ms'])} ms; to first frame: "
        f"p50 {_fmt(t['first_frame_p50_ms'])} ms, p95 {_fmt(t['first_frame_p95_ms'])} ms",
        f"  of which the engine's round: p50 {_fmt(t.get('engine_round_p50_ms'))} ms, "
        f"p95 {_fmt(t.get('engine_round_p95_ms'))} ms; the app's share: p50 "
        f"{_fmt(t.get('app_share_p50_ms'))} ms, p95 {_fmt(t.get('app_share_p95_ms'))} ms",
    ]
    if t.get("repeats_p95_ms"):
        each = ", ".join(_fmt(p95) for p95 in t["repeats_p95_ms"])
        out.append(f"  (the run with the median p95 of {len(t['repeats_p95_ms'])}: {each} ms)")
    return out


def _memory_targets(memory: dict[str, Any]) -> list[dict[str, Any]]:
    long_memory = memory.get("long") or {}
    targets = []
    for mode in ("greedy", "speculative"):
        figures = long_memory.get(mode) or {}
        transient = _get(figures, "4096", "decode_max_transient_bytes")
        history = 4096 * HISTORY_BYTES_PER_POSITION
        targets.append(
            _target(
                f"memory {mode}: no per-step history copy",
                "decode-step transient at 4096 < half the target's history",
                transient,
                None if transient is None else transient < history / 2,
                f"largest bytes allocated within one decode round, the finishing round apart "
                f"(history = {history} bytes)",
            )
        )
        peaks = sorted(
            (int(length), f["traced_peak_bytes"])
            for length, f in figures.items()
            if f.get("traced_peak_bytes") is not None
        )
        slopes = [
            (b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(peaks) if b[0] > a[0]
        ]
        growth = ratio(max(slopes), min(slopes)) if len(slopes) >= 2 and min(slopes) > 0 else None
        targets.append(
            _target(
                f"memory {mode}: linear peak",
                "peak bytes per extra context position stays flat (max/min slope <= 2)",
                growth,
                None if growth is None else growth <= 2.0,
                "slopes of traced peak vs context length: " + ", ".join(f"{s:.0f}" for s in slopes),
            )
        )
    return targets


# -- printing ---------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".1f", suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{spec}}{suffix}"
    return f"{value}{suffix}"


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    out = []
    env = results["environment"]
    out.append(
        f"deepinfer-tui benchmarks ({'quick' if results['quick'] else 'full'}) · "
        f"python {env['python']} · numpy {env['numpy']} · {env['cpu_count']} CPUs · "
        f"commit {env['git_commit'] or '?'}"
        + (" + uncommitted changes" if env.get("uncommitted_changes") else "")
    )
    out.append("BLAS: " + describe_blas(env))
    reference = results["reference"]
    if reference["available"]:
        out.append(f"Reference: core-deepinfer {reference.get('version') or ''} in this process.")
        out.append("NOTE: " + results["comparison_note"])
    else:
        out.append("Reference: not compared (" + reference["reason"] + ").")
    w = results["workloads"]
    rows = []
    for name in ("batch", "batch-greedy"):
        if name not in w:
            continue
        for who in ("ours", "reference"):
            r = w[name].get(who)
            if not r:
                continue
            rows.append(
                [
                    name,
                    who,
                    _fmt(r.get("tokens_per_second"), ".0f"),
                    _fmt(r.get("rounds_per_second"), ".1f"),
                    _fmt(r.get("step_mean_ms"), ".2f"),
                    _fmt(r.get("step_p95_ms"), ".2f"),
                    _fmt(r.get("tokens_per_round"), ".1f"),
                    _fmt(r.get("acceptance_rate"), ".2f"),
                    _mb(r.get("rss_peak_delta_bytes")),
                    r.get("truncated") or "",
                ]
            )
        tps = _get(w, name, "ratio", "tokens_per_second")
        if tps is not None:
            rows.append([name, "ratio", _fmt(tps, ".1f", "x"), "", "", "", "", "", "", ""])
    if rows:
        out.append("")
        out.append(
            _table(
                [
                    "workload",
                    "engine",
                    "tokens/s",
                    "rounds/s",
                    "step ms",
                    "p95 ms",
                    "tok/round",
                    "accept",
                    "RSS+MB",
                    "note",
                ],
                rows,
            )
        )
    if "long" in w:
        out.append("")
        out.append(_render_long(w["long"], results.get("tuning", {})))
    memory = results.get("memory") or {}
    if memory:
        out.append("")
        out.append(_render_memory(memory))
    for name, label in (("tui", "64 requests"), ("tui-prefixes", "48 requests on 4 prefixes")):
        if name in w:
            out.extend(_render_tui(name, label, w[name]["ours"]))
    out.append("")
    if results.get("quick"):
        out.append(
            "targets (reported, not asserted; --quick: short runs on small shapes, so these are "
            "only indicative, run without --quick to judge them):"
        )
    else:
        out.append("targets (reported, not asserted):")
    for t in results["targets"]:
        measured = t["measured"]
        text = "-" if measured is None else f"{measured:.4g}"
        out.append(
            f"  [{t['status']:>4}] {t['target']}: {t['goal']} · measured {text} ({t['detail']})"
        )
    return "\n".join(out)


def _render_long(long: dict[str, Any], tuning: dict[str, Any]) -> str:
    ours = long.get("ours") or {}
    theirs = long.get("reference") or {}
    ratios = long.get("ratio") or {}
    floor = {length: parts["total_ms"] for length, parts in _decode_floors(long).items()}
    rows = []
    for mode, lengths in ours.items():
        for length, f in lengths.items():
            t = _get(theirs, mode, length) or {}
            r = _get(ratios, mode, length) or {}
            note = []
            if f.get("truncated"):
                note.append("ours: " + f["truncated"])
            if t.get("truncated"):
                note.append("ref: " + t["truncated"])
            if t and t.get("new_tokens") != f.get("new_tokens"):
                note.append(f"ref ran {t.get('new_tokens')} new tokens")
            rows.append(
                [
                    mode,
                    length,
                    _fmt(f.get("prefill_seconds"), ".3f"),
                    _fmt(t.get("prefill_seconds"), ".3f"),
                    _fmt(r.get("prefill"), ".2f", "x"),
                    _fmt(f.get("decode_ms_per_token"), ".3f"),
                    _fmt(t.get("decode_ms_per_token"), ".3f"),
                    _fmt(r.get("decode_per_token"), ".1f", "x"),
                    _fmt(floor.get(length) if mode == "greedy" else None, ".3f"),
                    _fmt(_get(f, "decode", "acceptance_rate"), ".2f"),
                    _fmt(_get(t, "decode", "acceptance_rate"), ".2f"),
                    "; ".join(note),
                ]
            )
    width, context = tuning.get("long_draft_width"), tuning.get("long_draft_context")
    depth = f"; speculative drafts a {width}-token chain" if width else ""
    if context:
        depth += f", our draft reading the last {context} stored positions"
    title = f"long context (one request; prefill = first round; decode = after it{depth}):"
    if floor:
        title += (
            "\nfloor ms = the bare NumPy arithmetic of a greedy decode step, best of many runs "
            "(benchmarks/floor.py): its attentions over the whole history, which every step "
            "must compute, and one row's dense products as floor.py writes them"
        )
    return (
        title
        + "\n"
        + _table(
            [
                "mode",
                "context",
                "prefill s",
                "ref s",
                "ref/ours",
                "decode ms/tok",
                "ref ms/tok",
                "ref/ours",
                "floor ms",
                "accept",
                "ref accept",
                "note",
            ],
            rows,
        )
    )


def _render_memory(memory: dict[str, Any]) -> str:
    rows = []
    for name in ("batch", "batch-greedy"):
        m = memory.get(name)
        if m:
            rows.append(
                [
                    name,
                    "-",
                    _mb(m.get("traced_peak_bytes")),
                    _mb(m.get("prefill_transient_bytes")),
                    _kib(m.get("later_median_transient_bytes")),
                    _kib(m.get("later_max_transient_bytes")),
                    "-",
                    _fmt(m.get("committed_tokens")),
                ]
            )
    for mode, lengths in (memory.get("long") or {}).items():
        for length, m in lengths.items():
            rows.append(
                [
                    f"long {mode}",
                    length,
                    _mb(m.get("traced_peak_bytes")),
                    _mb(m.get("prefill_transient_bytes")),
                    _kib(m.get("decode_median_transient_bytes")),
                    _kib(m.get("decode_max_transient_bytes")),
                    _kib(m.get("finish_step_transient_bytes")),
                    _fmt(m.get("committed_tokens")),
                ]
            )
    return (
        "memory, ours (tracemalloc pass, separate from the timed runs; 'step' = bytes allocated"
        " within one round):\n"
        + _table(
            [
                "workload",
                "context",
                "peak MB",
                "prefill MB",
                "step KiB median",
                "decode KiB max",
                "finish KiB",
                "tokens",
            ],
            rows,
        )
    )


def _kib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.0f}"
