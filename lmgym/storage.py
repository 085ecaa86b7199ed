"""Files written whole or not at all, checked by hash, and read back as data only.

Everything lmgym writes that must survive a kill (checkpoints, saved models, cached warm starts,
GGUF copies, a run's files) is written aside and renamed into place (``written_aside`` for a
directory, ``write_aside`` for a file), so a reader sees the old version or the new one, never
half of one; a symlink in the way is replaced, never followed. ``find_damaged`` says which file
of a saved directory cannot be read, and ``load_data`` reads a torch file as tensors and plain
values only. This module imports nothing else of lmgym.
"""

from __future__ import annotations

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


@contextmanager
def written_aside(final: str | os.PathLike) -> Iterator[Path]:
    """Yields a fresh directory beside ``final`` to write into; on success it is fsynced and
    renamed to ``final`` (an existing ``final``, a link included, is replaced only then). On
    failure ``final`` is untouched and the partial directory is removed."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_aside(final: str | os.PathLike, data: str | bytes) -> None:
    """Writes one file whole: to a temp file beside ``final``, fsynced, then renamed over it, so
    a link at ``final`` is replaced by the file, never written through."""
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_data(file: str | os.PathLike) -> Any:
    """``torch.load`` of data only (tensors, numbers, strings, lists, dicts): a file holding
    anything else (code to run on load) is refused with ``DataError``."""
    import pickle

    import torch

    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise DataError(
            f"{str(file)!r} holds more than tensors and plain values: refused (a checkpoint is data, never code)"
        ) from e
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise DataError(f"{str(file)!r} is unreadable ({type(e).__name__}: {str(e).splitlines()[0]:.120})") from e


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
                json.loads(file.read_text(encoding="utf-8"))
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
    "find_damaged",
    "fsync_dir",
    "fsync_tree",
    "load_data",
    "remove",
    "sha256",
    "write_aside",
    "written_aside",
]
