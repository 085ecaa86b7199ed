"""The settings ``lmgym train`` picks, for Python users too (``PPOAgent.default(env_id)``).

With no ``--model``, ``lmgym train`` trains the embedded default model: a tiny Llama built from a
config, warm-started on the env's demonstrations (``lmgym.agents.warmstart``, cached), with the
PPO settings measured for it on Calculator-v0 (``TINY_MODEL_CONFIG``).
"""

from __future__ import annotations

from typing import Any

from lmgym.agents.config import PPOConfig

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
    cls: Any,
    env_id: str = "lmgym/Calculator-v0",
    env_kwargs: dict[str, Any] | None = None,
    warmstart: Any = None,
    use_cache: bool = True,
    **config: Any,
) -> Any:
    """``PPOAgent.default``: the agent ``lmgym train ENV_ID`` trains with no ``--model``.

    A tiny Llama built from a config and warm-started on the env's demonstrations (a
    ``WarmStartConfig``; cached unless ``use_cache=False``), with ``TINY_MODEL_CONFIG`` updated
    by ``config``. ``env_kwargs`` are the env's ``gym.make`` arguments; the warm start's ``seed``
    follows ``config["seed"]``.

    Example:
        >>> from lmgym.agents import PPOAgent
        >>> from lmgym.agents.warmstart import WarmStartConfig
        >>> tiny = WarmStartConfig(steps=1, demonstrations=2, n_layer=1, n_embd=16)
        >>> agent = PPOAgent.default("lmgym/Echo-v0", warmstart=tiny, use_cache=False, seed=1)
        >>> agent.config.learning_rate, agent.tokenizer.vocab_size
        (0.0003, 258)
    """
    from lmgym.agents.warmstart import WarmStartConfig, default_model

    warm = warmstart or WarmStartConfig(seed=int(config.get("seed", 0)))
    model, tokenizer, _ = default_model(env_id, env_kwargs, warm, use_cache=use_cache)
    return cls(model, tokenizer=tokenizer, config=default_config(**config))


__all__ = ["TINY_MODEL_CONFIG", "default_agent", "default_config"]
