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


class Preempted(BaseException):
    """SIGTERM or SIGUSR1 reached a run (a scheduler's preemption: SLURM, Kubernetes, a spot
    instance); raised where the run may stop (``Preemption``)."""


class Stopped(RunError):
    """A run preempted: its checkpoint written, one line, exit status 143 (128 + SIGTERM)."""

    status = 143
    said = "preempted"


class Preemption:
    """SIGTERM and SIGUSR1 as a clean stop: the signal raises ``Preempted`` at once, or, inside
    ``deferred()`` (an update with its metrics, evaluation and checkpoint; a checkpoint's writes),
    as soon as that ends, so that what is checkpointed is a whole update (a collect it breaks off
    is rewound: ``PPOAgent.rewind_collect``). Installed by ``install()`` in the main thread;
    once it has raised, the signals' default actions are back, so a second SIGTERM (or the
    scheduler's SIGKILL) ends the process at once, its checkpoints written aside and intact."""

    SIGNALS = ("SIGTERM", "SIGUSR1")

    def __init__(self) -> None:
        self.pending: str | None = None
        self.depth = 0

    def install(self) -> None:
        import signal

        for name in self.SIGNALS:
            signal.signal(getattr(signal, name), self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        import signal

        self.pending = signal.Signals(signum).name
        if not self.depth:
            self.stop()

    def stop(self) -> None:
        import signal

        for name in self.SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        received, self.pending = self.pending or "a signal", None
        raise Preempted(received)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if self.pending and not self.depth:
            self.stop()


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
    except Preempted as error:
        raise Stopped(describe(error)) from error
    except KeyboardInterrupt as error:
        raise Interrupted(describe(error)) from error
    except BaseException as error:  # noqa: BLE001 (whatever failed: one line, the traceback in a file)
        raise RunError(describe(error)) from error


__all__ = [
    "Interrupted",
    "Preempted",
    "Preemption",
    "RunError",
    "Stopped",
    "UsageError",
    "failure_line",
    "one_line_failures",
    "temporary_log",
]
