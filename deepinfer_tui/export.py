"""Exports: the trace-snapshot document (SVG, HTML, text), the JSON trace and a Perfetto trace.

Everything is rendered in memory first, then each file is written under a temporary name in
the target folder and renamed into place, so a failure (unwritable folder, full disk) never
leaves a half-written file behind. The same session state always produces identical bytes.
Rich only: this module must work headless, without Textual.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from .document import document_title, snapshot_document
from .replay import trace_data
from .session import Session

DEFAULT_EXPORT_DIR = Path("deepinfer-exports")  # where the app and `export` write
ALL_FORMATS = ("svg", "html", "txt", "json", "perfetto")
SUFFIXES = {
    "svg": ".svg",
    "html": ".html",
    "txt": ".txt",
    "json": ".trace.json",
    "perfetto": ".perfetto.json",
}
DOCUMENT_WIDTH = 120
ROUND_US = 1000  # synthetic time: one engine round is drawn as 1000 µs
MAX_STEM = 64  # characters of a name in a file name: with suffixes, far below 255


def parse_formats(text: str) -> tuple[str, ...]:
    """ "svg,html" -> ("svg", "html"); unknown or empty lists are a ValueError."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    return check_formats(names)


def check_formats(formats: Iterable[str]) -> tuple[str, ...]:
    chosen: list[str] = []
    for name in formats:
        if name not in SUFFIXES:
            raise ValueError(
                f"unknown export format {name!r}; choose from {', '.join(ALL_FORMATS)}"
            )
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ValueError(f"no export format chosen; choose from {', '.join(ALL_FORMATS)}")
    return tuple(chosen)


def safe_name(name: str) -> str:
    """A name usable as a file name on every filesystem, with no path in it, of at most
    MAX_STEM characters: a longer one is cut and ends in a hash of the whole name, so names
    that differ only after the cut still get files of their own."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "scenario"
    if len(safe) <= MAX_STEM:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[: MAX_STEM - len(digest) - 1].rstrip('-.')}-{digest}"


def base_name(session: Session) -> str:
    """File stem from scenario name and tick: default-t0012."""
    return f"{safe_name(session.scenario.name)}-t{session.engine.tick:04d}"


def free_stem(directory: Path, stem: str, suffixes: Iterable[str]) -> str:
    """`stem`, or `stem-2`, `stem-3`, ... : the first for which none of the files exist, so a
    second export at the same tick (after a cancel, say) keeps the first."""
    suffixes = list(suffixes)
    candidate, number = stem, 1
    while any((directory / f"{candidate}{suffix}").exists() for suffix in suffixes):
        number += 1
        candidate = f"{stem}-{number}"
    return candidate


# -- the trace-snapshot document ---------------------------------------------------------------


def record_document(
    snapshot: dict[str, Any], log: list[dict[str, Any]], width: int = DOCUMENT_WIDTH
) -> Console:
    """Render the document once into a recording console (fixed width, no environment)."""
    console = Console(
        record=True,
        width=width,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        no_color=False,
        legacy_windows=False,
        emoji=False,
        highlight=False,
        markup=False,  # request ids and scenario names are text, whatever brackets they hold
        _environ={},  # COLUMNS, NO_COLOR and friends must not change an export
    )
    console.print(snapshot_document(snapshot, log))
    return console


def render_document(session: Session) -> dict[str, str]:
    """SVG, HTML and text from one recording (clear=False keeps it for the next export)."""
    snapshot = session.snapshot()
    console = record_document(snapshot, session.log())
    title = document_title(snapshot)
    svg = console.export_svg(title=title, clear=False, unique_id="deepinfer-trace")
    page = console.export_html(clear=False)
    page = page.replace(
        '<meta charset="UTF-8">', f'<meta charset="UTF-8">\n<title>{html.escape(title)}</title>', 1
    )
    # Rich pads every line to the console width; trailing blanks only get in a reader's way.
    text = "\n".join(line.rstrip() for line in console.export_text(clear=False).splitlines())
    return {"svg": svg, "html": page, "txt": text + "\n"}


# -- Chrome trace-event JSON (Perfetto, chrome://tracing) --------------------------------------

# Where each phase sits inside a round's 1000 µs (synthetic: rounds have no measured duration).
PHASES = {
    "restore": (0, 200),
    "draft": (200, 450),
    "budget": (450, 550),
    "verify": (550, 800),
    "commit": (800, 1000),
}
PHASE_KINDS = ("restore", "draft", "verify", "commit")
INSTANT_OFFSETS = {
    "evict": 10,
    "preempt": 500,
    "deferred": 500,
    "publish": 990,
    "finished": 995,
    "step_aborted": 999,
}
ENGINE_TID = 0
PID = 1  # one process: the session


def round_metrics(session: Session) -> dict[int, dict[str, Any]]:
    """Engine metrics at the end of every round, by re-executing the session's operations.

    Events do not carry pool counts, and a session only holds its current state, so a fresh
    session replays the recorded operations (deterministic) and reads metrics after each step.
    """
    fresh = Session(session.scenario)
    metrics = {0: fresh.engine.metrics()}
    for operation in session.operations:
        fresh.apply(operation)
        tick = fresh.engine.tick
        if operation.get("op") == "undo":
            metrics = {t: m for t, m in metrics.items() if t <= tick}
        metrics[tick] = fresh.engine.metrics()
    return metrics


def _round_start(tick: int) -> int:
    return (tick - 1) * ROUND_US


def _in_round(event: dict[str, Any]) -> bool:
    """Whether an event happened inside round `tick` (else between rounds, after it)."""
    kind = event["kind"]
    if kind == "finished":
        return event.get("finish_reason") != "cancelled"
    return kind in PHASES or kind in INSTANT_OFFSETS


def perfetto_trace(session: Session) -> dict[str, Any]:
    """Rounds as slices per request with phase sub-slices, counters, and named threads."""
    log = session.log()
    threads: dict[str, int] = {}
    for event in log:
        request_id = event.get("request_id")
        if request_id and request_id not in threads:
            threads[request_id] = len(threads) + 1
    events = [
        _metadata("process_name", ENGINE_TID, {"name": f"deepinfer-tui · {session.scenario.name}"}),
        _metadata("thread_name", ENGINE_TID, {"name": "engine"}),
        _metadata("thread_sort_index", ENGINE_TID, {"sort_index": 0}),
    ]
    for request_id, tid in threads.items():
        events.append(_metadata("thread_name", tid, {"name": request_id}))
        events.append(_metadata("thread_sort_index", tid, {"sort_index": tid}))

    # Per round: which phases each request went through, and the round's details.
    rounds: dict[int, dict[str, dict[str, dict[str, Any]]]] = {}
    for event in log:
        kind, tick = event["kind"], event["tick"]
        if kind in PHASE_KINDS and event.get("request_id"):
            rounds.setdefault(tick, {}).setdefault(event["request_id"], {})[kind] = event
        elif kind == "budget":
            rounds.setdefault(tick, {}).setdefault("", {})["budget"] = event
    for tick in sorted(rounds):
        start = _round_start(tick)
        per_request = rounds[tick]
        engine_args = {"requests": len([r for r in per_request if r])}
        events.append(_slice(f"round t{tick}", start, ROUND_US, ENGINE_TID, "round", engine_args))
        if "budget" in per_request.get("", {}):
            budget = per_request[""]["budget"]
            low, high = PHASES["budget"]
            events.append(
                _slice(
                    "budget",
                    start + low,
                    high - low,
                    ENGINE_TID,
                    "phase",
                    {
                        "total": budget["total"],
                        "per_request": budget["per_request"],
                        "expected_tokens": budget["expected_tokens"],
                    },
                )
            )
        for request_id, phases in per_request.items():
            if not request_id:
                continue
            tid = threads[request_id]
            commit = phases.get("commit")
            args = (
                {
                    "tokens": commit["tokens"],
                    "accepted": commit["accepted"],
                    "verified": commit["verified"],
                    "outcome": commit["outcome"],
                }
                if commit
                else {}
            )
            events.append(_slice(f"round t{tick}", start, ROUND_US, tid, "round", args))
            for kind in PHASE_KINDS:
                if kind in phases:
                    low, high = PHASES[kind]
                    events.append(
                        _slice(
                            kind, start + low, high - low, tid, "phase", _phase_args(phases[kind])
                        )
                    )
    for event in log:
        kind, tick = event["kind"], event["tick"]
        if kind in PHASES:
            continue
        offset = INSTANT_OFFSETS.get(kind, 0)
        ts = _round_start(tick) + offset if _in_round(event) else tick * ROUND_US
        tid = threads.get(event.get("request_id") or "", ENGINE_TID)
        name = event["text"] if kind == "note" else kind
        args = {k: v for k, v in event.items() if k not in ("tick", "kind", "request_id")}
        events.append(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "cat": kind,
                "pid": PID,
                "tid": tid,
                "ts": max(0, ts),
                "args": args,
            }
        )
    previous: dict[str, Any] | None = None
    for tick, metrics in sorted(round_metrics(session).items()):
        ts = tick * ROUND_US
        blocks = metrics["blocks"]
        # Disjoint series, so the stacked counter track adds up to the whole pool.
        series = {
            "requests": blocks["held"],
            "cached": blocks["cached"],
            "retained": blocks["retained"],
        }
        events.append(_counter("blocks", ts, {**series, "free": blocks["free"]}))
        drafts = metrics["drafts"]
        overall = drafts["accepted"] / drafts["verified"] if drafts["verified"] else 0.0
        verified = drafts["verified"] - (previous["drafts"]["verified"] if previous else 0)
        accepted = drafts["accepted"] - (previous["drafts"]["accepted"] if previous else 0)
        events.append(
            _counter(
                "acceptance %",
                ts,
                {
                    "this round": round(100 * accepted / verified, 3) if verified > 0 else 0.0,
                    "overall": round(100 * overall, 3),
                },
            )
        )
        previous = metrics
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": session.scenario.name,
            "tick": session.engine.tick,
            "time": f"synthetic: one engine round is drawn as {ROUND_US} µs",
        },
    }


def _slice(
    name: str, ts: int, dur: int, tid: int, category: str, args: dict[str, Any]
) -> dict[str, Any]:
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


def _counter(name: str, ts: int, values: dict[str, float]) -> dict[str, Any]:
    return {"ph": "C", "name": name, "pid": PID, "tid": ENGINE_TID, "ts": ts, "args": values}


def _metadata(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    """A process or thread naming/ordering record (Chrome trace-event phase "M")."""
    return {"ph": "M", "name": name, "pid": PID, "tid": tid, "ts": 0, "args": args}


def _phase_args(event: dict[str, Any]) -> dict[str, Any]:
    kind = event["kind"]
    if kind == "restore":
        return {
            "cache": event["cache"],
            "reused_positions": event["reused_positions"],
            "reason": event["reason"],
        }
    if kind in ("draft", "verify"):
        nodes = event.get("nodes", [])
        verdicts = [n.get("verdict") for n in nodes]
        return {
            "nodes": max(0, len(nodes) - 1),
            "accepted": verdicts.count("accepted"),
            "rejected": verdicts.count("rejected"),
        }
    return {k: v for k, v in event.items() if k not in ("tick", "kind", "request_id")}


# -- writing -----------------------------------------------------------------------------------


def render_exports(session: Session, formats: Iterable[str] = ALL_FORMATS) -> dict[str, str]:
    """Every requested format as text, keyed by format name (nothing is written)."""
    chosen = check_formats(formats)
    texts: dict[str, str] = {}
    if {"svg", "html", "txt"} & set(chosen):
        texts.update(render_document(session))
    if "json" in chosen:
        texts["json"] = json.dumps(trace_data(session), indent=1, allow_nan=False) + "\n"
    if "perfetto" in chosen:
        texts["perfetto"] = json.dumps(perfetto_trace(session), allow_nan=False) + "\n"
    return {name: texts[name] for name in chosen}


def export_all(
    session: Session, directory: Path, formats: Iterable[str] = ALL_FORMATS
) -> list[Path]:
    """Write the chosen formats into `directory` (created if missing); returns the paths."""
    directory = Path(directory)
    texts = render_exports(session, formats)
    make_export_folder(directory)
    stem = free_stem(directory, base_name(session), (SUFFIXES[name] for name in texts))
    files = {directory / f"{stem}{SUFFIXES[name]}": text for name, text in texts.items()}
    write_atomically(files)
    return list(files)


class WriteFailed(OSError):
    """Files that could not be written into a usable folder (a full disk, say): a failure of
    the output, not bad input."""


def make_export_folder(directory: Path) -> None:
    """Create `directory` if missing; an OSError that says why it cannot hold exports."""
    if directory.exists() and not directory.is_dir():
        raise OSError(f"cannot export into {directory}: it is a file, not a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(
            f"cannot create export folder {directory}: {error.strerror or error}"
        ) from None


def write_atomically(files: dict[Path, str]) -> None:
    """All files or none: temporaries first, then renames; undo our renames on failure."""
    temporaries: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            temporaries[path] = _write_temporary(path, text)
    except OSError as error:
        _remove(temporaries.values())
        raise WriteFailed(f"cannot write {path}: {error.strerror or error}") from None
    placed: list[Path] = []
    existed = {path for path in files if path.exists()}
    try:
        for path, temporary in temporaries.items():
            os.replace(temporary, path)
            placed.append(path)
    except OSError as error:
        _remove(t for p, t in temporaries.items() if p not in placed)
        # Files that existed before held the same deterministic export; keep those.
        _remove(p for p in placed if p not in existed)
        raise WriteFailed(f"cannot write {path}: {error.strerror or error}") from None


def _write_temporary(path: Path, text: str) -> Path:
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; exports are meant to be shared
    except BaseException:
        _remove([temporary])
        raise
    return temporary


def _remove(paths: Iterable[Path]) -> None:
    for path in list(paths):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
