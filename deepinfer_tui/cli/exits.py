"""The exit-status policy and the guard around standard output.

Bad input is one line on stderr and status 2, never a traceback; output that cannot be written
(a full disk, a closed pipe) is status 1, as is anything a command reports as failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO, cast

from ..describe import error_message
from ..export import WriteFailed
from ..parsing import shorten
from ..replay import TraceError
from ..scenario import ScenarioError

PROG = "deepinfer-tui"
OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130
MAX_ERROR_LINE = 1000  # characters: a message quoting a huge value must still be one line to read

# The policy as data: the help's epilog and docs/cli.md are written from it.
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (OK, "success"),
    (
        FAILED,
        "a check failed (demo, generate --check, replay), a request ended in an error, output "
        "or export files could not be written, or an internal error (a bug: set "
        "DEEPINFER_TUI_TRACEBACK=1 to see its traceback)",
    ),
    (BAD_INPUT, "bad input: one line on stderr naming the problem, nothing written"),
    (INTERRUPTED, "interrupted (ctrl+c)"),
)


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


class OutputLost(Exception):
    """Standard output could not be written (exit status 1). Not an OSError: a command's
    handler for files it was given (bad input, status 2) must not take it for one."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class GuardedOutput:
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


def fail(message: str, where: str = PROG, status: int = BAD_INPUT) -> int:
    """One line on stderr, led by the program (and command) name; returns `status`."""
    line = shorten(" ".join(message.split()), MAX_ERROR_LINE)
    if not line.startswith(PROG):
        line = f"{where}: {line}"
    print(line, file=sys.stderr)
    return status


def with_guarded_stdout(run: Callable[[], int]) -> int:
    """`run()` with standard output guarded: output lost is status 1 with one line (quiet
    when the reader left, as `| head` does)."""
    if sys.stdout is None:  # started with `>&-`: print() would drop everything silently
        return fail("standard output is closed, so nothing could be printed")
    stdout = sys.stdout
    sys.stdout = cast(TextIO, GuardedOutput(stdout))
    try:
        code = run()  # --help and --version print while the arguments are parsed
        sys.stdout.flush()  # output lost to a full disk is a failure, not a silent success
    except OutputLost as lost:
        _silence(stdout)
        if not isinstance(lost.error, BrokenPipeError):
            reason = lost.error.strerror or lost.error
            print(f"{PROG}: cannot write the output ({reason})", file=sys.stderr)
        return FAILED
    finally:
        sys.stdout = stdout
    return code


def _silence(stdout: TextIO) -> None:
    """Point stdout at the null device, so the exit's final flush of what could not be
    written does not complain too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
    except (OSError, ValueError):  # not a file descriptor (e.g. a StringIO): nothing to do
        pass


def exit_status(run: Callable[[], int], where: str) -> int:
    """Run a command; every exception becomes its exit status and (at most) one line."""
    try:
        return int(run())
    except OutputLost:  # with_guarded_stdout() reports it: not bad input, and not a bug
        raise
    except KeyboardInterrupt:
        return INTERRUPTED
    except MemoryError as error:  # e.g. a pool of a billion blocks: NumPy names the size
        return fail(f"not enough memory for these settings ({error_message(error)})", where)
    except WriteFailed as error:  # the files, not the input: as for standard output
        return fail(error_message(error), where, status=FAILED)
    except (UsageError, ScenarioError, TraceError, ValueError, OSError) as error:
        return fail(error_message(error), where)
    except Exception as error:
        if os.environ.get("DEEPINFER_TUI_TRACEBACK"):
            raise
        print(
            f"{where}: internal error: {type(error).__name__}: {error_message(error)} "
            "(a bug; rerun with DEEPINFER_TUI_TRACEBACK=1 to see where, and please report it)",
            file=sys.stderr,
        )
        return FAILED
