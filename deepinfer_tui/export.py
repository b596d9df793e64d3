"""Exports: the trace-snapshot document (SVG, HTML, text), the JSON trace and a Perfetto trace.

The Perfetto trace is built in `perfetto.py`, the JSON trace in `tracefile.py`; this module
renders the document, chooses file names and writes the files.

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

from .diff_view import FrameBefore
from .document import document_title, snapshot_document
from .perfetto import perfetto_trace
from .session import Session
from .tracefile import trace_data

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
    snapshot: dict[str, Any],
    log: list[dict[str, Any]],
    width: int = DOCUMENT_WIDTH,
    before: FrameBefore | None = None,
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
    console.print(snapshot_document(snapshot, log, before))
    return console


def render_document(session: Session, before: FrameBefore | None = None) -> dict[str, str]:
    """SVG, HTML and text from one recording (clear=False keeps it for the next export);
    `before`: the frame before the last operation, for the round diff."""
    snapshot = session.snapshot()
    console = record_document(snapshot, session.log(), before=before)
    title = document_title(snapshot)
    svg = console.export_svg(title=title, clear=False, unique_id="deepinfer-trace")
    page = console.export_html(clear=False)
    page = page.replace(
        '<meta charset="UTF-8">', f'<meta charset="UTF-8">\n<title>{html.escape(title)}</title>', 1
    )
    # Rich pads every line to the console width; trailing blanks only get in a reader's way.
    text = "\n".join(line.rstrip() for line in console.export_text(clear=False).splitlines())
    return {"svg": svg, "html": page, "txt": text + "\n"}


# -- writing -----------------------------------------------------------------------------------


def render_exports(
    session: Session, formats: Iterable[str] = ALL_FORMATS, before: FrameBefore | None = None
) -> dict[str, str]:
    """Every requested format as text, keyed by format name (nothing is written)."""
    chosen = check_formats(formats)
    texts: dict[str, str] = {}
    if {"svg", "html", "txt"} & set(chosen):
        texts.update(render_document(session, before))
    if "json" in chosen:
        texts["json"] = json.dumps(trace_data(session), indent=1, allow_nan=False) + "\n"
    if "perfetto" in chosen:
        texts["perfetto"] = json.dumps(perfetto_trace(session), allow_nan=False) + "\n"
    return {name: texts[name] for name in chosen}


def export_all(
    session: Session,
    directory: Path,
    formats: Iterable[str] = ALL_FORMATS,
    before: FrameBefore | None = None,
) -> list[Path]:
    """Write the chosen formats into `directory` (created if missing); returns the paths."""
    directory = Path(directory)
    texts = render_exports(session, formats, before)
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
