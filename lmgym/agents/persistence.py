"""Saving and loading an agent's parts: the model, its value head and config as files, and the
training state (optimizer, KL controller, counters, every RNG) as plain data that
``learn(resume_from=...)`` continues from. ``PPOAgent.save``, ``load``, ``save_checkpoint`` and
``load_training_state`` hand this module parts and plain data; it never sees the agent.

A save is written aside and renamed into place (``lmgym.storage``); a checkpoint also gets a
manifest of its files, written last (``lmgym.agents.checkpoints``). Loading reads tensors and
plain values only: a checkpoint is data, never code.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmgym.agents import checkpoints
from lmgym.agents.models import MANIFEST, MANIFEST_FIELDS, load_model
from lmgym.storage import load_json, written_aside
from lmgym.tokenizers import Tokenizer, load_tokenizer

TRAINING_STATE = "training_state.pt"
VALUE_HEAD = "value_head.pt"
CONFIG = "ppo_config.json"


def write(
    path: Path,
    model: Any,
    tokenizer: Any,
    value_head: dict[str, torch.Tensor],
    config: dict[str, Any],
    manifest: dict[str, Any],
    ref_model: Any = None,
    training_state: dict[str, Any] | None = None,
) -> None:
    """The files of a save in ``path`` (a fresh directory), each announced to ``checkpoints.wrote``:
    the model (``from_pretrained``-loadable; for LoRA, the adapters), tokenizer, value head,
    config, the manifest (``lmgym_model.json``), the reference model if any, and the training state."""
    model.save_pretrained(path)
    checkpoints.wrote("model")
    tokenizer.save_pretrained(path)
    checkpoints.wrote("tokenizer")
    save_tensors(value_head, path / VALUE_HEAD)
    checkpoints.wrote(VALUE_HEAD)
    (path / CONFIG).write_text(json.dumps(config, indent=2, allow_nan=False))
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2))
    checkpoints.wrote(MANIFEST)
    if ref_model is not None:
        ref_model.save_pretrained(path / "ref_model")
        checkpoints.wrote("ref_model")
    if training_state is not None:
        save_tensors(training_state, path / TRAINING_STATE)
        checkpoints.wrote(TRAINING_STATE)


def save_tensors(value: Any, file: Path) -> None:
    """``torch.save`` through a Python file, so that a full disk is an ``ENOSPC`` ``OSError``
    (torch's own writer says only "unexpected pos")."""
    with open(file, "wb") as f:
        torch.save(value, f)


def manifest(base: str | None, adapters: bool, vocab_size: int, extra: dict[str, Any] | None) -> dict[str, Any]:
    """A save's ``lmgym_model.json``: the base model of adapters, the vocabulary, and ``extra``
    (how the env was made: ``lmgym.agents.models.MANIFEST_FIELDS``)."""
    unknown = set(extra or {}) - set(MANIFEST_FIELDS)
    if unknown:
        raise ValueError(f"unknown manifest entries: {', '.join(sorted(unknown))}")
    return {"base": base or None, "adapters": adapters, "vocab_size": vocab_size, **(extra or {})}


def save(path: str | os.PathLike, **parts: Any) -> None:
    """``write``'s files, written aside and renamed into place: ``path`` holds the old save or the
    new one, never half of one."""
    with written_aside(Path(path)) as tmp:
        write(tmp, **parts)


def save_checkpoint(checkpoint_dir: str | os.PathLike, name: str, info: dict[str, Any], **parts: Any) -> Path:
    """Writes ``checkpoint_dir/name`` (``write``'s files, then a manifest of them with ``info``,
    written last) and points ``checkpoint_dir/last`` at it; see ``lmgym.agents.checkpoints``."""
    checkpoint_dir = Path(checkpoint_dir)
    with written_aside(checkpoint_dir / name) as tmp:
        write(tmp, **parts)
        checkpoints.finish(tmp, info)
    return checkpoints.publish(checkpoint_dir, name)


def read(path: str | os.PathLike) -> dict[str, Any]:
    """What ``save`` wrote: ``model``, ``tokenizer``, ``ref_model`` (or ``None``), ``config`` (a
    dict, ``PPOConfig.to_dict``'s) and ``value_head`` (a state dict), as data."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no saved agent at {str(path)!r}")
    config = load_json(path / CONFIG, max_bytes=2**20)
    if not isinstance(config, dict):
        raise ValueError(f"{str(path / CONFIG)!r} is not a JSON object")
    return {
        "model": load_model(path),
        "tokenizer": load_tokenizer(path),
        "ref_model": load_model(path / "ref_model") if (path / "ref_model").is_dir() else None,
        "config": config,
        "value_head": checkpoints.load_state(path / VALUE_HEAD),
    }


def read_checkpoint(path: str | os.PathLike, signature: dict[str, list[int]], env: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint ``learn`` wrote (``path``: the checkpoint, ``checkpoints/last``, the checkpoints
    dir or the run dir), checked complete, undamaged, data only and of this model (``signature``)
    and env (``env_fingerprint``'s); ``CheckpointError`` otherwise. Returns ``path`` (the checkpoint
    used), the ``model``'s and ``ref_model``'s state dicts, the ``value_head``'s and the
    ``training_state``."""
    path = checkpoints.resolve(path)
    checkpoints.check_match(checkpoints.verify(path), signature, env, path)
    with checkpoints.fitting(path):
        return {
            "path": path,
            "training_state": checkpoints.load_state(path / TRAINING_STATE),
            "value_head": checkpoints.load_state(path / VALUE_HEAD),
            "model": load_model(path).state_dict(),  # adapters: the same PeftModel layout
            "ref_model": load_model(path / "ref_model").state_dict() if (path / "ref_model").is_dir() else None,
        }


def env_fingerprint(env_id: str | None, tokens: str) -> dict[str, Any]:
    """What a checkpoint must share with the run that resumes it: the env id and the tokens."""
    return {"id": env_id, "tokens": tokens}


def tokens_fingerprint(tokenizer: Tokenizer) -> str:
    """SHA-256 of every token's text (``PPOAgent.tokens_fingerprint`` keeps it: a 49k-token
    vocabulary takes a noticeable time to decode)."""
    vocab = [tokenizer.decode([i]) for i in range(min(tokenizer.vocab_size, 1 << 20))]
    return hashlib.sha256(json.dumps(vocab).encode("utf-8", "replace")).hexdigest()


def rng_state() -> dict[str, Any]:
    """torch's, numpy's and Python's global RNG states, as plain values and tensors."""
    state: Any = np.random.get_state()
    return {
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": [
            state[0],
            torch.from_numpy(np.asarray(state[1], dtype=np.int64)),
            *map(int, state[2:4]),
            float(state[4]),
        ],
        "python_rng": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what ``rng_state`` gave."""
    torch.set_rng_state(state["torch_rng"])
    name, keys, pos, has_gauss, gauss = state["numpy_rng"]
    np.random.set_state((str(name), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(gauss)))
    version, internal, python_gauss = state["python_rng"]
    random.setstate((int(version), tuple(int(x) for x in internal), python_gauss))


__all__ = [
    "env_fingerprint",
    "manifest",
    "read",
    "read_checkpoint",
    "rng_state",
    "save",
    "save_checkpoint",
    "set_rng_state",
    "tokens_fingerprint",
    "write",
]
