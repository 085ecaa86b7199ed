"""The defaults ``lmgym train`` picks, for Python users too: ``PPOAgent.default(env_id)``.

With no ``--model``, ``lmgym train`` trains the embedded default model: a tiny Llama built from a
config, warm-started on the env's demonstrations (``lmgym.agents.warmstart``, cached), with the
PPO settings measured for it on Calculator-v0 (``TINY_MODEL_CONFIG``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lmgym.agents.config import PPOConfig

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent
    from lmgym.agents.warmstart import WarmStartConfig

TINY_MODEL_CONFIG: dict[str, Any] = {
    "learning_rate": 3e-4,  # a tiny model needs more than the 1.41e-5 meant for pretrained ones
    "episodes_per_update": 64,
    "mini_batch_size": 32,
    "kl_coef": 0.02,
    "anneal_lr": True,  # without it, a run that reached ~70% at update 60 could fall to ~46% by the end
}
"""PPOConfig overrides for the embedded default model (measured on Calculator-v0)."""


def default_config(**overrides: Any) -> PPOConfig:
    """``PPOConfig`` with the default model's settings, then ``overrides`` (flat names work)."""
    return PPOConfig(**{**TINY_MODEL_CONFIG, **overrides})


def default_agent(
    env_id: str = "lmgym/Calculator-v0",
    env_kwargs: dict[str, Any] | None = None,
    warmstart: WarmStartConfig | None = None,
    use_cache: bool = True,
    **config: Any,
) -> PPOAgent:
    """The agent ``lmgym train ENV_ID`` trains with no ``--model``.

    Args:
        env_id: the env the default model warm-starts on (it needs an ``oracle``).
        env_kwargs: ``gym.make`` arguments of that env (``--env-arg``).
        warmstart: the default model and its warm start (``WarmStartConfig()``; ``seed`` follows
            ``config["seed"]`` when given).
        use_cache: load an identical warm start from the cache, and save a new one there.
        **config: ``PPOConfig`` overrides of ``TINY_MODEL_CONFIG``.

    Example:
        >>> from lmgym.agents.warmstart import WarmStartConfig
        >>> agent = default_agent("lmgym/Echo-v0", warmstart=WarmStartConfig(steps=1, demonstrations=2,
        ...                       n_layer=1, n_embd=16), use_cache=False, seed=1)
        >>> agent.config.learning_rate, agent.tokenizer.vocab_size
        (0.0003, 258)
    """
    from lmgym.agents.ppo import PPOAgent
    from lmgym.agents.warmstart import WarmStartConfig, default_model

    warm = warmstart or WarmStartConfig()
    if "seed" in config and warmstart is None:
        warm = dataclasses.replace(warm, seed=int(config["seed"]))
    model, tokenizer, _ = default_model(env_id, env_kwargs, warm, use_cache=use_cache)
    return PPOAgent(model, tokenizer=tokenizer, config=default_config(**config))


__all__ = ["TINY_MODEL_CONFIG", "default_agent", "default_config"]
