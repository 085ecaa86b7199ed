"""Saving and loading an agent: the model, its value head and config, and the training state
(optimizer, KL controller, counters, every RNG) that ``learn(resume_from=...)`` continues from.

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
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lmgym.agents import checkpoints
from lmgym.agents.models import MANIFEST, load_model
from lmgym.storage import load_json, written_aside
from lmgym.tokenizers import Tokenizer, load_tokenizer

if TYPE_CHECKING:
    import gymnasium as gym

    from lmgym.agents.config import PPOConfig
    from lmgym.agents.ppo import PPOAgent


def save(agent: PPOAgent, path: str | os.PathLike, training_state: bool = False, manifest: dict | None = None) -> None:
    """Writes the model (``from_pretrained``-loadable; for LoRA, the adapters), tokenizer, value
    head, config and a manifest (``lmgym_model.json``: the base model of adapters, and
    ``manifest``'s entries, e.g. how the env was wrapped); with ``training_state``, also what
    ``learn(resume_from=...)`` needs. Everything is written aside and renamed into place, so
    ``path`` holds the old save or the new one, never half of one."""
    agent.accelerator.wait_for_everyone()
    if agent.accelerator.is_main_process:
        with written_aside(Path(path)) as tmp:
            write(agent, tmp, training_state, manifest)


def save_checkpoint(agent: PPOAgent, checkpoint_dir: str | os.PathLike, envs: Any = None) -> Path:
    """Writes ``checkpoint_dir/update-NNNNNN`` (model, optimizer, counters, RNGs, and a manifest
    written last) and points ``checkpoint_dir/last`` at it; see ``lmgym.agents.checkpoints``."""
    checkpoint_dir = Path(checkpoint_dir)
    name = f"update-{agent.num_updates:06d}"
    agent.accelerator.wait_for_everyone()
    if not agent.accelerator.is_main_process:
        return checkpoint_dir / name
    with written_aside(checkpoint_dir / name) as tmp:
        write(agent, tmp, training_state=True)
        info = {
            "num_updates": agent.num_updates,
            "num_episodes": agent.num_episodes,
            "model_signature": checkpoints.model_signature(agent.model),
            "env": env_fingerprint(agent, envs),
        }
        checkpoints.finish(tmp, info)
    return checkpoints.publish(checkpoint_dir, name)


def env_fingerprint(agent: PPOAgent, envs: Any) -> dict[str, Any]:
    """What a checkpoint must share with the run that resumes it: the env id and the tokens."""
    from lmgym.agents.rollout import env_id_of

    return {"id": env_id_of(envs) if envs is not None else None, "tokens": agent.tokens_fingerprint}


def tokens_fingerprint(tokenizer: Tokenizer) -> str:
    """SHA-256 of every token's text (``PPOAgent.tokens_fingerprint`` keeps it: a 49k-token
    vocabulary takes a noticeable time to decode)."""
    vocab = [tokenizer.decode([i]) for i in range(min(tokenizer.vocab_size, 1 << 20))]
    return hashlib.sha256(json.dumps(vocab).encode("utf-8", "replace")).hexdigest()


def write(agent: PPOAgent, path: Path, training_state: bool = False, manifest: dict | None = None) -> None:
    """The files of a save in ``path`` (a fresh directory), each announced to ``checkpoints.wrote``."""
    agent.model.save_pretrained(path)
    checkpoints.wrote("model")
    agent.tokenizer.save_pretrained(path)  # type: ignore[attr-defined]
    checkpoints.wrote("tokenizer")
    torch.save(agent.value_head.state_dict(), path / "value_head.pt")
    checkpoints.wrote("value_head.pt")
    (path / "ppo_config.json").write_text(json.dumps(agent.config.to_dict(), indent=2, allow_nan=False))
    model: Any = agent.model
    base = model.get_base_model().name_or_path if agent.is_peft else None
    info = {
        "base": base or None,
        "adapters": agent.is_peft,
        "vocab_size": agent.tokenizer.vocab_size,
        **(manifest or {}),
    }
    (path / MANIFEST).write_text(json.dumps(info, indent=2))
    checkpoints.wrote(MANIFEST)
    if agent.ref_model is not None:
        agent.ref_model.save_pretrained(path / "ref_model")
        checkpoints.wrote("ref_model")
    if training_state:
        torch.save(training_state_of(agent), path / "training_state.pt")
        checkpoints.wrote("training_state.pt")


def training_state_of(agent: PPOAgent) -> dict[str, Any]:
    """Optimizer, KL coefficient, counters and RNG states, as plain values and tensors."""
    return {
        "optimizer": agent.optimizer.state_dict(),
        "kl_coef": float(agent.kl_controller.value),
        "num_episodes": agent.num_episodes,
        "num_updates": agent.num_updates,
        "seed_rng": agent.rollout.seed_rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": _plain_numpy_state(np.random.get_state()),
        "python_rng": random.getstate(),
    }


def load(cls: type[PPOAgent], path: str | os.PathLike, config: PPOConfig | None = None) -> PPOAgent:
    """An agent from ``save``: model (base + adapters for LoRA, the base named by the manifest),
    tokenizer, value head, reference model and config."""
    from lmgym.agents.config import PPOConfig

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"no saved agent at {str(path)!r}")
    if config is None:
        saved = load_json(path / "ppo_config.json", max_bytes=2**20)
        if not isinstance(saved, dict):
            raise ValueError(f"{str(path / 'ppo_config.json')!r} is not a JSON object")
        config = PPOConfig.from_dict(saved)
    ref = load_model(path / "ref_model") if (path / "ref_model").is_dir() else None
    agent = cls(load_model(path), tokenizer=load_tokenizer(path), ref_model=ref, config=config)
    agent.value_head.load_state_dict(checkpoints.load_state(path / "value_head.pt"))
    return agent


def load_training_state(agent: PPOAgent, path: str | os.PathLike, envs: gym.Env | Any = None) -> Path:
    """Restores weights, optimizer, KL controller, counters and RNGs from a checkpoint that
    ``learn`` wrote (``path``: the checkpoint, ``checkpoints/last``, the checkpoints dir or the
    run dir), after checking that it is complete, undamaged, data only and of this model and
    env (``checkpoints.CheckpointError`` otherwise). Returns the checkpoint it used."""
    path = checkpoints.resolve(path)
    manifest = checkpoints.verify(path)
    checkpoints.check_match(manifest, checkpoints.model_signature(agent.model), env_fingerprint(agent, envs), path)
    state = checkpoints.load_state(path / "training_state.pt")
    head = checkpoints.load_state(path / "value_head.pt")
    try:
        agent.model.load_state_dict(load_model(path).state_dict())  # adapters: the same PeftModel layout
        if agent.ref_model is not None and (path / "ref_model").is_dir():
            agent.ref_model.load_state_dict(load_model(path / "ref_model").state_dict())
        agent.value_head.load_state_dict(head)
        agent.optimizer.load_state_dict(state["optimizer"])
        agent.kl_controller.value = float(state["kl_coef"])
        agent.num_episodes, agent.num_updates = int(state["num_episodes"]), int(state["num_updates"])
        agent.rollout.seed_rng.bit_generator.state = state["seed_rng"]
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(_numpy_state(state["numpy_rng"]))
        random.setstate(_python_state(state["python_rng"]))
    except (KeyError, TypeError, ValueError, RuntimeError, OSError) as e:
        raise checkpoints.CheckpointError(
            f"{str(path)!r} does not fit this agent ({type(e).__name__}: {str(e).splitlines()[0]:.150})"
        ) from e
    agent.sync_engine()  # the engine samples with the loaded weights, as their version
    return path


def _plain_numpy_state(state: Any) -> list[Any]:
    """``np.random.get_state()`` as plain values (a checkpoint holds no numpy objects)."""
    return [
        state[0],
        torch.from_numpy(np.asarray(state[1], dtype=np.int64)),
        int(state[2]),
        int(state[3]),
        float(state[4]),
    ]


def _numpy_state(plain: list[Any]) -> tuple:
    return (str(plain[0]), np.asarray(plain[1], dtype=np.uint32), int(plain[2]), int(plain[3]), float(plain[4]))


def _python_state(plain: Any) -> tuple:
    version, internal, gauss = plain
    return int(version), tuple(int(x) for x in internal), gauss


__all__ = ["env_fingerprint", "load", "load_training_state", "save", "save_checkpoint", "training_state_of"]
