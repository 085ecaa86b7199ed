"""The ``lmgym`` command's failures: bad input (``UsageError``, exit status 2) and a run that
failed (``RunError``, 1; ``Interrupted``, 130), each printed as one line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class RunError(Exception):
    """A run that failed after it started (an env that raised): printed as one line, exit status 1."""

    status = 1
    said = "failed"


class Interrupted(RunError):
    """A run stopped by Ctrl-C (``KeyboardInterrupt``): one line, exit status 130."""

    status = 130
    said = "interrupted"


def failure_line(error: BaseException, log: Any, more: str = "") -> str:
    """One line for a failure whose traceback is written to ``log`` (a path): an ``EnvError``'s
    own message (it names its env), else the error's type and first line; ``more`` is added in the
    parentheses that say where the traceback is."""
    import traceback

    from lmgym.core import EnvError
    from lmgym.storage import write_aside

    said = str(error).strip().splitlines()[0][:400] if str(error).strip() else ""
    line = said if isinstance(error, EnvError) else f"{type(error).__name__}{f': {said}' if said else ''}"
    try:
        write_aside(log, "".join(traceback.format_exception(error)))
    except OSError as e:  # a full disk, say
        return f"{line} (its traceback could not be written to {log}: {e.strerror or e}{more})"
    return f"{line} (traceback in {log}{more})"


def temporary_log() -> Path:
    """A fresh file for a command's traceback (``eval``'s, ``doctor``'s: they have no run dir)."""
    import tempfile

    fd, name = tempfile.mkstemp(prefix="lmgym-", suffix=".log")
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def one_line_failures(describe: Callable[[BaseException], str] | None = None) -> Iterator[None]:
    """A command's body: bad input and failures it already said pass through; Ctrl-C is
    ``Interrupted`` and any other failure a ``RunError``, each one line (``describe(error)``:
    by default ``failure_line`` with the traceback in a ``temporary_log``).

    Example:
        >>> with one_line_failures(lambda e: "it broke"):
        ...     raise ZeroDivisionError
        Traceback (most recent call last):
        lmgym.cli.errors.RunError: it broke
    """
    describe = describe or (lambda error: failure_line(error, temporary_log()))
    try:
        yield
    except (UsageError, RunError):
        raise
    except KeyboardInterrupt as error:
        raise Interrupted(describe(error)) from error
    except BaseException as error:  # noqa: BLE001 (whatever failed: one line, the traceback in a file)
        raise RunError(describe(error)) from error


__all__ = ["Interrupted", "RunError", "UsageError", "failure_line", "one_line_failures", "temporary_log"]
