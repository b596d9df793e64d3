"""Reading the project's JSON files (scenarios, traces, request lists) with one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MAX_BYTES = 64 * 2**20  # far above any scenario or trace this project writes


def read_json(path: str | Path, kind: str, error: type[Exception]) -> Any:
    """Parse the JSON document at `path`; any problem raises `error` naming the file.

    `kind` names what the file should be ("scenario", "trace", "requests file").
    """
    path = Path(path)
    try:
        # Bounded: a device or a pipe (/dev/zero) must not be read until memory runs out.
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise error(f"{path}: larger than {MAX_BYTES // 2**20} MB, too large for a {kind}")
        text = data.decode("utf-8")
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
    except RecursionError:
        raise error(f"{path}: its JSON is nested too deeply to be a {kind}") from None
    except ValueError as failure:
        if "digits" in str(failure):  # Python's advice would be about its own settings
            problem = f"a number longer than {sys.get_int_max_str_digits()} digits"
        else:
            problem = " ".join(str(failure).split())
        raise error(f"{path}: not a usable JSON {kind} ({problem})") from None
