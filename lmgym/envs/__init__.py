"""The shipped environments; ``register_envs()`` puts them in Gymnasium's registry."""

from __future__ import annotations

import gymnasium as gym

# id -> (entry point, max_episode_steps)
ENVS: dict[str, tuple[str, int]] = {
    "lmgym/Calculator-v0": ("lmgym.envs.calculator:make_calculator_env", 4),
    "lmgym/Echo-v0": ("lmgym.envs.echo:EchoEnv", 1),
}


def register_envs() -> None:
    """Registers every lmgym env under the ``lmgym/`` namespace (idempotent)."""
    for env_id, (entry_point, max_steps) in ENVS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_steps)
