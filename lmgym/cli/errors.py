"""The ``lmgym`` command's failures: bad input (``UsageError``, exit status 2) and a run that
failed (``RunError``, 1; ``Interrupted``, 130), each printed as one line."""

from __future__ import annotations

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


__all__ = ["Interrupted", "RunError", "UsageError", "failure_line"]
