"""``lmgym rescore``: a run's recorded episodes scored again by a new reward function, without
sampling again.

The reward function has the signature ``Prompt-v0`` takes, ``reward_fn(prompt, completion,
info) -> float``: ``prompt`` is the episode's first observation, ``completion`` the model's
text (a list of each turn's text when the episode had several turns) and ``info`` the reset
info (a task's fields, e.g. its ``target``) updated with the last turn's. Its reward is the
episode's new return; a positive one is a success. The new rewards go to
``RUN/rescores/NAME.jsonl`` (one line per rescored episode, with its old return and success and
the line of ``episodes.jsonl`` it scores), never over ``episodes.jsonl``; ``lmgym view RUN`` shows
both.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmgym.envs.prompt import call_reward
from lmgym.storage import write_aside

EPISODES_FILE = "episodes.jsonl"
RESCORES_DIR = "rescores"
MAX_LINE_BYTES = 8 << 20
"""An ``episodes.jsonl`` line longer than this is skipped unread (as ``lmgym view`` does)."""


def load_function(spec: str) -> Callable[..., Any]:
    """``"module:function"`` or ``"path/to/file.py:function"`` (the working directory is on the
    import path) -> the function; ``ValueError`` naming what is missing."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ValueError(f"--reward {spec!r} is not module:function (or path/to/file.py:function)")
    if where.endswith(".py"):
        if not Path(where).is_file():
            raise ValueError(f"--reward {spec!r}: no file {where!r}")
        found = importlib.util.spec_from_file_location(Path(where).stem, where)
        assert found is not None and found.loader is not None
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise ValueError(f"--reward {spec!r}: cannot import {where!r} ({e})") from e
        finally:
            sys.path.remove(os.getcwd())
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"--reward {spec!r}: {where!r} has no function {name!r}")
    return fn


def recorded_episodes(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``(line number, record)`` for each line of ``episodes.jsonl`` (0-based, as ``lmgym view``
    numbers them); ``None`` for a line that is not a JSON object or is too long to read."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f):
            if not raw.strip():
                continue
            record = None
            if len(raw) <= MAX_LINE_BYTES:
                try:
                    record = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    pass
            yield number, record if isinstance(record, dict) else None


@dataclass
class Change:
    """Success and mean return of one kind of episode (``train``, ``held-out``), before and after."""

    kind: str
    episodes: int = 0
    old_success: float = 0.0
    new_success: float = 0.0
    old_return: float = 0.0
    new_return: float = 0.0

    def add(self, row: dict[str, Any]) -> None:
        n = self.episodes = self.episodes + 1
        for ours, key in (("old_success", "old_success"), ("new_success", "success")):
            setattr(self, ours, getattr(self, ours) + (float(row[key]) - getattr(self, ours)) / n)
        for ours, key in (("old_return", "old_return"), ("new_return", "return")):
            setattr(self, ours, getattr(self, ours) + (float(row[key]) - getattr(self, ours)) / n)

    def __str__(self) -> str:
        return (
            f"{self.kind:<10} {self.episodes:>8}   {self.old_success:6.1%} -> {self.new_success:6.1%}"
            f"   {self.old_return:8.3f} -> {self.new_return:8.3f}"
        )


def rescore(
    run_dir: str | os.PathLike,
    reward_fn: Callable[..., Any],
    name: str = "rescore",
    timeout: float | None = None,
) -> tuple[Path, list[Change], list[str]]:
    """Scores every recorded episode of ``run_dir`` with ``reward_fn`` (module docs). Returns the
    file written (``RUN/rescores/NAME.jsonl``, ``NAME-2.jsonl``... when it exists), the change
    per kind of episode and what was skipped. A reward function that raises stops the rescore
    with the episode it was scoring; nothing is written then."""
    run = Path(run_dir)
    source = run / EPISODES_FILE
    if not source.is_file():
        raise FileNotFoundError(f"{str(run)!r} has no {EPISODES_FILE}: is it a run directory?")
    rows, unreadable, old = [], 0, 0
    for number, record in recorded_episodes(source):
        if record is None:
            unreadable += 1
            continue
        completions = record.get("completions")
        if not isinstance(completions, list) or not isinstance(record.get("prompt"), str):
            old += 1
            continue
        completion = completions[0] if len(completions) == 1 else list(completions)
        info = record.get("info")
        info = info if isinstance(info, dict) else {}
        where = f"episode at line {number + 1} of {EPISODES_FILE}"
        where += f" (update {record.get('update')}, seed {record.get('seed')})"
        try:
            reward = call_reward(reward_fn, record["prompt"], completion, dict(info), timeout)
        except (RuntimeError, ValueError) as e:
            raise RuntimeError(f"{where}: {e}") from e
        reward = reward or 0.0  # a reward function that timed out: no reward
        rows.append(
            {
                "line": number,
                "update": record.get("update"),
                "kind": record.get("kind"),
                "seed": record.get("seed"),
                "return": reward,
                "success": reward > 0,
                "old_return": float(record.get("return") or 0.0),
                "old_success": bool(record.get("success")),
            }
        )
    if not rows:
        raise ValueError(
            f"no episode of {str(source)!r} could be rescored ({unreadable} unreadable, {old} without text)"
        )
    changes: dict[str, Change] = {}
    for row in rows:
        changes.setdefault(str(row["kind"]), Change(str(row["kind"]))).add(row)
    skipped = [f"{unreadable} unreadable lines"] * bool(unreadable)
    skipped += [f"{old} episodes recorded without their text (a run from before lmgym rescore)"] * bool(old)
    target = free_path(run / RESCORES_DIR, name)
    write_aside(target, "".join(json.dumps(row) + "\n" for row in rows))
    return target, list(changes.values()), skipped


def free_path(folder: Path, name: str) -> Path:
    """``folder/NAME.jsonl``, or ``NAME-2.jsonl``, ``NAME-3.jsonl``... when taken (never over one)."""
    if folder.is_symlink():
        raise OSError(f"{str(folder)!r} is a link: refused")
    folder.mkdir(exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "rescore"
    path, n = folder / f"{stem}.jsonl", 1
    while path.exists() or path.is_symlink():
        n += 1
        path = folder / f"{stem}-{n}.jsonl"
    return path


def read_rescores(run_dir: str | os.PathLike, limit: int = 16) -> dict[str, dict[int, dict[str, Any]]]:
    """``{name: {line of episodes.jsonl: row}}`` from ``RUN/rescores/*.jsonl`` (at most ``limit``
    files; unreadable rows are left out), for ``lmgym view``."""
    folder = Path(run_dir) / RESCORES_DIR
    if not folder.is_dir() or folder.is_symlink():
        return {}
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl"))[:limit]:
        if path.is_symlink() or path.stat().st_size > 64 * MAX_LINE_BYTES:
            continue
        rows = {}
        for _, row in recorded_episodes(path):
            if row is not None and isinstance(row.get("line"), int) and isinstance(row.get("return"), (int, float)):
                rows[row["line"]] = {"return": row["return"], "success": bool(row.get("success"))}
        out[path.stem] = rows
    return out


__all__ = ["Change", "load_function", "read_rescores", "rescore"]
