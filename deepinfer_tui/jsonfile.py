"""Reading the project's JSON files (scenarios, traces, request lists) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path, kind: str, error: type[Exception]) -> Any:
    """Parse the JSON document at `path`; any problem raises `error` naming the file.

    `kind` names what the file should be ("scenario", "trace", "requests file").
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a {kind}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a text file, so not a JSON {kind}") from None
    except OSError as failure:
        raise error(f"{path}: cannot read it ({failure.strerror or failure})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as failure:
        raise error(
            f"{path}: not valid JSON (line {failure.lineno}, column {failure.colno}: {failure.msg})"
        ) from None
