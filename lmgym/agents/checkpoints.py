"""Checkpoints that are data, complete or absent, and never overwrite the last good one.

A checkpoint is a directory ``checkpoint_dir/update-000012/`` written aside first
(``.tmp-update-000012-...``), every file fsynced, then ``checkpoint.json`` (the manifest: each
file's size and SHA-256, the counters, the model's parameter shapes, the env and the
tokenizer) written last, then renamed into place; ``checkpoint_dir/last`` is a symlink switched
to it atomically (``os.replace``). The previous checkpoint is kept until the new one is
complete, older ones are deleted. A kill at any point leaves ``last`` on a complete checkpoint.

Loading reads only tensors and plain values (``torch.load(weights_only=True)``, safetensors),
checks every file against the manifest, and refuses a checkpoint of another model or env with
one line (``CheckpointError``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmgym.storage import DataError, fsync_dir, load_data, sha256

CHECKPOINT_MANIFEST = "checkpoint.json"
LAST = "last"
KEEP = 2
"""Complete checkpoints kept: the newest, and the one before it."""

AFTER_WRITE: list[Callable[[str], None]] = []
"""Called with the name of each part of a checkpoint once it is written (tests kill or fail a
save here, deterministically, to check that no point of the write loses the last good one)."""


class CheckpointError(DataError):
    """A checkpoint that cannot be used: incomplete, damaged, not data, or of another model or env."""


def wrote(part: str) -> None:
    for hook in AFTER_WRITE:
        hook(part)


def file_table(path: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes": n, "sha256": hex}}`` of every file under ``path``."""
    table = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != CHECKPOINT_MANIFEST):
        table[str(file.relative_to(path))] = {"bytes": file.stat().st_size, "sha256": sha256(file)}
    return table


def finish(tmp: Path, info: dict[str, Any]) -> None:
    """Writes the manifest of a checkpoint written in ``tmp``: last, after every other file."""
    manifest = {"files": file_table(tmp), **info}
    (tmp / CHECKPOINT_MANIFEST).write_text(json.dumps(manifest, indent=2))
    wrote(CHECKPOINT_MANIFEST)


def publish(checkpoint_dir: Path, name: str) -> Path:
    """Points ``checkpoint_dir/last`` at ``name`` (atomically) and deletes all but the ``KEEP``
    newest complete checkpoints."""
    wrote("renamed")
    link = checkpoint_dir / f".{LAST}-{uuid.uuid4().hex[:8]}"
    os.symlink(name, link)
    last = checkpoint_dir / LAST
    if last.is_dir() and not last.is_symlink():  # a checkpoint from before this layout
        os.rename(last, checkpoint_dir / f".old-{LAST}-{uuid.uuid4().hex[:8]}")
    os.replace(link, last)
    fsync_dir(checkpoint_dir)
    wrote(LAST)
    complete = sorted(p for p in checkpoint_dir.glob("update-*") if (p / CHECKPOINT_MANIFEST).is_file())
    for old in complete[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    for partial in checkpoint_dir.glob(".*"):  # left by a kill mid-write
        if partial.name.startswith((".tmp-", ".old-")):
            shutil.rmtree(partial, ignore_errors=True)
    return checkpoint_dir / name


def resolve(path: str | os.PathLike) -> Path:
    """The complete checkpoint ``path`` names: a checkpoint, ``checkpoints/last``, a checkpoint
    directory (its ``last``, else its newest complete checkpoint) or a run directory (its
    ``checkpoints/``). Raises ``CheckpointError`` saying what is missing."""
    path = Path(path)
    if (path / "checkpoints").is_dir() and not (path / CHECKPOINT_MANIFEST).exists():
        path = path / "checkpoints"
    if not path.exists():
        raise CheckpointError(f"{str(path)!r} does not exist")
    if (path / CHECKPOINT_MANIFEST).is_file():
        return path.resolve()
    if (path / "training_state.pt").is_file():
        raise CheckpointError(f"{str(path)!r} has no {CHECKPOINT_MANIFEST}: it is incomplete or from an older lmgym")
    if (path / LAST / CHECKPOINT_MANIFEST).is_file():
        return (path / LAST).resolve()
    complete = sorted(p for p in path.glob("update-*") if (p / CHECKPOINT_MANIFEST).is_file())
    if complete:
        return complete[-1].resolve()
    raise CheckpointError(f"{str(path)!r} is not a checkpoint and holds no complete one")


def verify(path: Path) -> dict[str, Any]:
    """The manifest of checkpoint ``path``, after checking its shape and every file it lists (size
    and SHA-256)."""
    from lmgym.storage import load_json

    try:
        manifest = load_json(path / CHECKPOINT_MANIFEST, max_bytes=64 * 2**20)
        problem = manifest_problem(manifest)
    except DataError as e:
        raise CheckpointError(str(e)) from e
    if problem:
        raise CheckpointError(f"{str(path / CHECKPOINT_MANIFEST)!r} is not a checkpoint's manifest ({problem})")
    for name, expected in manifest["files"].items():
        file = member(path, name)
        if not file.is_file():
            raise CheckpointError(f"{str(file)!r} is missing")
        if file.stat().st_size != expected["bytes"] or sha256(file) != expected["sha256"]:
            raise CheckpointError(f"{str(file)!r} is damaged (it differs from what the checkpoint wrote)")
    return manifest


def manifest_problem(manifest: Any) -> str | None:
    """What is wrong with the shape of a checkpoint's manifest, or ``None``: ``files`` maps names
    to ``{"bytes": int, "sha256": str}``, ``model_signature`` names to shapes, ``env`` is an object,
    the counters are integers."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and type(v.get("bytes")) is int and isinstance(v.get("sha256"), str) for v in files.values()
    ):
        return "files is not a table of files"
    signature = manifest.get("model_signature", {})
    if not isinstance(signature, dict) or not all(
        isinstance(v, list) and all(type(d) is int for d in v) for v in signature.values()
    ):
        return "model_signature is not a table of shapes"
    if not isinstance(manifest.get("env", {}), dict):
        return "env is not an object"
    for key in ("num_updates", "num_episodes"):
        if key in manifest and type(manifest[key]) is not int:
            return f"{key} is not an integer"
    return None


def member(checkpoint: Path, name: Any) -> Path:
    """The file ``name`` of a manifest names in ``checkpoint``: a relative path with no ``..``,
    staying inside the checkpoint once links are resolved (``CheckpointError`` otherwise)."""
    parts = Path(name).parts if isinstance(name, str) else ()
    if not parts or Path(name).is_absolute() or ".." in parts or "\x00" in name:
        raise CheckpointError(f"{str(checkpoint)!r}: its manifest names {name!r:.120}, which is not a file of it")
    file = checkpoint / name
    if not file.resolve().is_relative_to(checkpoint.resolve()) or any(
        (checkpoint / Path(*parts[: k + 1])).is_symlink() for k in range(len(parts))
    ):
        raise CheckpointError(f"{str(checkpoint)!r}: its manifest names {name!r:.120}, a link out of the checkpoint")
    return file


def load_state(file: Path) -> Any:
    """``storage.load_data``, refusing a file that is not data with ``CheckpointError``."""
    try:
        return load_data(file)
    except DataError as e:
        raise CheckpointError(str(e)) from e


@contextmanager
def fitting(path: Path) -> Iterator[None]:
    """Loading checkpoint ``path`` into a model or agent: what does not fit it (a key, a shape, a
    type) is a ``CheckpointError`` naming the checkpoint."""
    try:
        yield
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, OSError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(
            f"{str(path)!r} does not fit this agent ({type(e).__name__}: {str(e).splitlines()[0]:.150})"
        ) from e


def model_signature(model: Any) -> dict[str, list[int]]:
    """Parameter name -> shape: what must match to load one model's weights into another."""
    return {name: list(t.shape) for name, t in model.state_dict().items()}


def check_match(manifest: dict[str, Any], signature: dict[str, list[int]], env: dict[str, Any], path: Path) -> None:
    """Refuses a checkpoint of another model (parameters, shapes) or another env (id, tokens)."""
    saved = manifest.get("model_signature") or {}
    if saved != signature:
        diff = sorted(set(saved) ^ set(signature)) or [n for n in signature if saved.get(n) != signature[n]]
        name = diff[0]
        raise CheckpointError(
            f"{str(path)!r} holds another model ({name}: {saved.get(name)} in the checkpoint, "
            f"{signature.get(name)} here): resume with the model it was trained from"
        )
    for key, here in env.items():
        there = manifest.get("env", {}).get(key)
        if here is not None and there is not None and there != here:
            raise CheckpointError(
                f"{str(path)!r} was trained on another env ({key}: {there!r:.80} there, {here!r:.80} here)"
            )
