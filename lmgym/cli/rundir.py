"""The run directory ``lmgym train --out DIR`` writes: what it holds, and who may write it."""

from __future__ import annotations

import atexit
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from lmgym.cli.options import UsageError
from lmgym.storage import remove

if TYPE_CHECKING:
    from lmgym.cli.spec import RunSpec

RUN_FILES = (
    "model",
    "warmstart",
    "checkpoints",
    "metrics.csv",
    "episodes.jsonl",
    "summary.json",
    "config.json",
    "transcripts.md",
    "learning_curve.png",
    "report.html",
    "tensorboard",
    "error.log",
)
"""What ``lmgym train`` writes to ``--out``: a directory holding any of these holds a run."""


def lock_owner(lock: IO[str]) -> str:
    """Who the lock file says holds it: ``pid N on HOST since TIME`` (empty when no one wrote it)."""
    lock.seek(0)
    fields = lock.read().split()
    return f"pid {fields[0]} on {fields[1]} since {fields[2]}" if len(fields) == 3 else ""


def claim_run_dir(spec: RunSpec) -> IO[str]:
    """Locks ``--out`` for this run (a second ``lmgym train`` on it is refused, naming the process
    that holds it) and refuses to write over a run there unless ``--resume`` continues it or
    ``--overwrite`` replaces it. A lock whose process is gone (``kill -9``, a lost machine: the
    kernel or the file server released it) is taken over, saying so in one line. Returns the
    open lock file, held until the process ends."""
    out = spec.out
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / ".lmgym.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # a link: refused
        lock = os.fdopen(fd, "a+")
    except OSError as e:
        raise UsageError(f"--out {str(out)!r}: {e.strerror or e}") from e
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # on NFS, Linux takes it as a lock the server holds
    except OSError as e:
        holder = lock_owner(lock)
        lock.close()
        raise UsageError(
            f"another lmgym train{f' ({holder})' if holder else ''} is writing to {str(out)!r}: wait for it, "
            "or use another --out"
        ) from e
    stale = lock_owner(lock)
    if stale:
        print(f"note: took over the run lock of {stale}, which no longer holds it (it ended without unlocking)")
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()} {socket.gethostname() or 'localhost'} {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    lock.flush()
    atexit.register(release, lock)
    existing = [name for name in RUN_FILES if (out / name).exists() or (out / name).is_symlink()]
    links = [name for name in existing if (out / name).is_symlink()]
    if links and not (spec.overwrite and spec.resume is None):  # --overwrite removes the link itself
        lock.close()
        name = links[0]
        why = (
            "inside the run dir: refused (a resumed run reads its own files, not links)"
            if inside(out / name, out)
            else "outside the run dir: refused (a run writes only inside its run dir)"
        )
        raise UsageError(f"--out {str(out)!r}: {name} is a link to {os.readlink(out / name)!r}, {why}")
    if existing and spec.resume is None:
        if not spec.overwrite:
            lock.close()
            raise UsageError(
                f"--out {str(out)!r} holds a run already ({', '.join(existing[:3])}): continue it with "
                f"--resume {out / 'checkpoints' / 'last'}, pick a new --out, or pass --overwrite to replace it"
            )
        for name in existing:  # checked above; links are removed as links, never followed
            remove(out / name)
    return lock


def release(lock: IO[str]) -> None:
    """A run that ends (cleanly, or on an exception) empties its lock file: no takeover note next time."""
    try:
        lock.seek(0)
        lock.truncate()
        lock.close()
    except (OSError, ValueError):  # already closed
        pass


def inside(path: Path, directory: Path) -> bool:
    """Whether ``path``, links resolved, is ``directory`` or below it (a loop of links is not)."""
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return False


__all__ = ["RUN_FILES", "claim_run_dir"]
