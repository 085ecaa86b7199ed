"""The shipped environments; ``register_envs()`` puts them in Gymnasium's registry."""

from __future__ import annotations

import gymnasium as gym

# id -> (entry point, max_episode_steps)
ENVS: dict[str, tuple[str, int]] = {
    "lmgym/Calculator-v0": ("lmgym.envs.calculator:make_calculator_env", 4),
    "lmgym/Countdown-v0": ("lmgym.envs.countdown:CountdownEnv", 2),
    "lmgym/Echo-v0": ("lmgym.envs.echo:EchoEnv", 1),
    "lmgym/GuessNumber-v0": ("lmgym.envs.guess_number:GuessNumberEnv", 10),
    "lmgym/Maze-v0": ("lmgym.envs.maze:MazeEnv", 40),
    "lmgym/Pipeline-v0": ("lmgym.envs.prompt:PipelineEnv", 16),
    "lmgym/Prompt-v0": ("lmgym.envs.prompt:PromptEnv", 1),
    "lmgym/PythonTool-v0": ("lmgym.envs.python_tool:make_python_tool_env", 4),
    "lmgym/Wordle-v0": ("lmgym.envs.wordle:WordleEnv", 6),
}


TOOL_ENVS = ("lmgym/Calculator-v0", "lmgym/PythonTool-v0")
"""Envs whose steps call tools: ``gym.make_vec`` gives them a ``ConcurrentVectorEnv`` (their tool
calls overlap; ``backend="ray"`` for Ray actors), through ``lmgym.vector.make_vec``."""


def register_envs() -> None:
    """Registers every lmgym env under the ``lmgym/`` namespace (idempotent), the adapters of the
    task libraries (``lmgym.compat``) included: their libraries load only when one is made."""
    from lmgym.compat import COMPAT
    from lmgym.vector import vector_entry_point

    shipped = {env_id: (entry_point, steps) for env_id, (entry_point, steps, *_) in COMPAT.items()}
    for env_id, (entry_point, max_steps) in {**ENVS, **shipped}.items():
        if env_id not in gym.registry:
            vector = vector_entry_point(env_id) if env_id in TOOL_ENVS else None
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_steps, vector_entry_point=vector)
