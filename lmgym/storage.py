"""Files written whole or not at all, checked by hash, and read back as data only.

Everything lmgym writes that must survive a kill (checkpoints, saved models, cached warm starts,
GGUF copies, a run's files) is written aside and renamed into place (``written_aside`` for a
directory, ``write_aside`` for a file), so a reader sees the old version or the new one, never
half of one; a symlink in the way is replaced, never followed. ``find_damaged`` says which file
of a saved directory cannot be read, and ``load_data`` reads a torch file as tensors and plain
values only. This module imports nothing else of lmgym.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class DataError(ValueError):
    """A file that cannot be used: unreadable, damaged, or holding more than data."""


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_tree(path: Path) -> None:
    """Flushes every file and directory under ``path`` (and ``path`` itself) to disk."""
    for root, _, files in os.walk(path):
        for name in files:
            if os.path.islink(os.path.join(root, name)):
                continue  # a link's target is not part of the tree
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Removes a file, a directory tree or a link (the link itself, never what it points to)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


FULL_BYTES = 1 << 20
"""Free bytes under which a failed write is taken for a full disk (torch's and safetensors' own
errors do not say ENOSPC)."""


FULL_SAID = ("No space left on device", "StorageFull", "Disk quota exceeded")
"""What the errors of writers that do not raise an ``ENOSPC`` ``OSError`` say of a full disk."""


class DiskFull(OSError):
    """A write that failed for want of space (ENOSPC, a quota), naming what it was writing."""

    def __str__(self) -> str:
        return f"no space left on the device to write {self.filename}"


def disk_full(error: BaseException, path: str | os.PathLike) -> DiskFull | None:
    """``error`` (raised writing ``path``) as a ``DiskFull`` when the disk is what failed it: an
    ``ENOSPC``/``EDQUOT`` ``OSError``, or any write error while less than ``FULL_BYTES`` are free
    there; else ``None``."""
    if isinstance(error, DiskFull):
        return error
    full = isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
    full = full or any(said in str(error) for said in FULL_SAID)  # safetensors' Rust error, say
    if not full and isinstance(error, (OSError, RuntimeError)):
        where = Path(path)
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            full = shutil.disk_usage(where).free < FULL_BYTES
        except OSError:
            pass
    return DiskFull(errno.ENOSPC, "no space left on the device", str(path)) if full else None


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """A write of ``path``: a failure for want of space is raised as ``DiskFull`` naming it."""
    try:
        yield
    except Exception as e:
        full = disk_full(e, path)
        if full is None or full is e:
            raise
        raise full from e


@contextmanager
def written_aside(final: str | os.PathLike) -> Iterator[Path]:
    """Yields a fresh directory beside ``final`` to write into; on success it is fsynced and
    renamed to ``final`` (an existing ``final``, a link included, is replaced only then). On
    failure ``final`` is untouched and the partial directory is removed (a full disk's failure
    raised as ``DiskFull``)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        yield tmp
        fsync_tree(tmp)
        old = None
        if final.exists() or final.is_symlink():
            old = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(final.parent)
        if old is not None:
            remove(old)
    except BaseException as e:
        full = disk_full(e, final) if isinstance(e, Exception) else None  # before the partial write is gone
        shutil.rmtree(tmp, ignore_errors=True)
        if full is not None and full is not e:
            raise full from e
        raise


def write_aside(final: str | os.PathLike, data: str | bytes) -> None:
    """Writes one file whole: to a temp file beside ``final``, fsynced, then renamed over it, so
    a link at ``final`` is replaced by the file, never written through."""
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with writing(final):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


MAX_DEPTH = 10
"""Containers inside containers that a data file may hold (an optimizer's state needs 4)."""
MAX_ITEMS = 1_000_000
"""Values a data file may hold, counted as a walk meets them (a container referenced twice counts
twice): a file of lists that hold the same list twice at each level is tiny, and a walk of it
without a memo (torch's optimizer loading) never ends."""
MAX_JSON_BYTES = 16 * 2**20
"""The largest JSON file of a model or run directory lmgym reads."""


def data_problem(value: Any, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> str | None:
    """What makes ``value`` unsafe to walk (nested deeper than ``max_depth``, more than
    ``max_items`` values as a walk meets them), or ``None``.

    Example:
        >>> deep = []
        >>> for _ in range(40): deep = [deep, deep]
        >>> data_problem({"a": [1, 2]}), data_problem(deep)
        (None, 'nested more than 10 deep')
    """
    count, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > max_items:
            return f"more than {max_items:,} values"
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= max_depth and children:
            return f"nested more than {max_depth} deep"
        stack.extend((child, depth + 1) for child in children)
    return None


def load_json(file: str | os.PathLike, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file from a directory lmgym did not necessarily write (a model, a run): at most
    ``max_bytes`` read, nested at most ``MAX_DEPTH`` deep; else ``DataError`` saying why."""
    path = Path(file)
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise DataError(f"{str(path)!r} is unreadable ({e.strerror or e})") from e
    if len(raw) > max_bytes:
        raise DataError(f"{str(path)!r} is larger than {max_bytes // 2**20} MiB: refused")
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise DataError(f"{str(path)!r} is not JSON ({type(e).__name__}: {str(e)[:100]})") from e
    problem = data_problem(value)
    if problem:
        raise DataError(f"{str(path)!r} is {problem}: refused")
    return value


def load_data(file: str | os.PathLike) -> Any:
    """``torch.load`` of data only (tensors, numbers, strings, lists, dicts): a file holding
    anything else (code to run on load), or data nested too deep to walk (``data_problem``), is
    refused with ``DataError``."""
    import pickle

    import torch

    try:
        value = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise DataError(
            f"{str(file)!r} holds more than tensors and plain values: refused (a checkpoint is data, never code)"
        ) from e
    except (OSError, RuntimeError, EOFError, ValueError, RecursionError, MemoryError) as e:
        raise DataError(f"{str(file)!r} is unreadable ({type(e).__name__}: {str(e).splitlines()[0]:.120})") from e
    problem = data_problem(value)
    if problem:
        raise DataError(f"{str(file)!r} holds data {problem}: refused")
    return value


def find_damaged(path: str | os.PathLike) -> str | None:
    """The first file of a saved model directory that cannot be read, or ``None``: every
    ``*.safetensors`` opened, every ``*.pt`` loaded as data, every ``*.json`` parsed."""
    from safetensors import safe_open

    for file in sorted(Path(path).rglob("*")):
        if not file.is_file():
            continue
        try:
            if file.suffix == ".safetensors":
                with safe_open(str(file), framework="pt") as f:
                    for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                        f.get_slice(key)
            elif file.suffix == ".pt":
                load_data(file)
            elif file.suffix == ".json":
                load_json(file)
        except Exception as e:
            return f"{str(file)!r} is damaged or unreadable ({type(e).__name__})"
    return None


def cache_dir() -> Path:
    """``$LMGYM_CACHE``, else ``$XDG_CACHE_HOME/lmgym``, else ``~/.cache/lmgym``."""
    if os.environ.get("LMGYM_CACHE"):
        return Path(os.environ["LMGYM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lmgym"


__all__ = [
    "DataError",
    "cache_dir",
    "data_problem",
    "find_damaged",
    "fsync_dir",
    "fsync_tree",
    "load_data",
    "load_json",
    "remove",
    "sha256",
    "write_aside",
    "written_aside",
]
