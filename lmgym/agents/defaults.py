"""The settings ``lmgym train`` picks, for Python users too (``PPOAgent.default(env_id)``).

With no ``--model``, ``lmgym train`` trains the embedded default model: a tiny Llama built from a
config, warm-started on the env's demonstrations (``lmgym.agents.warmstart``, cached), with the
PPO settings measured for it on Calculator-v0 (``TINY_MODEL_CONFIG``).

With ``--model`` (a pretrained model, a HF directory or a ``.gguf`` file) it follows
``pretrained_recipe``: LoRA adapters, their learning rate, a short warm start on the env's
oracle where it has one, smaller batches and one epoch, and a turn budget sized from the task
in the model's own tokens (``action_budget``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from lmgym.agents.config import PPOConfig

TINY_MODEL_CONFIG: dict[str, Any] = {
    "learning_rate": 3e-4,  # a tiny model needs more than the 1.41e-5 meant for pretrained ones
    "episodes_per_update": 64,
    "mini_batch_size": 32,
    "kl_coef": 0.02,
    "anneal_lr": True,  # without it, a run that reached ~70% at update 60 could fall to ~46% by the end
}
"""PPOConfig overrides for the embedded default model (measured on Calculator-v0)."""


PRETRAINED_CONFIG: dict[str, Any] = {
    "learning_rate": 1e-4,  # LoRA adapters (SmolLM2-135M on Calculator-v0: benchmarks/real_model.py)
    "episodes_per_update": 32,  # a pretrained model's turn costs ~100x the tiny model's on a CPU
    "mini_batch_size": 8,
    "n_epochs": 1,
    "kl_coef": 0.0,  # no reference forward; the LoRA rank and the short run bound the drift
}
"""PPOConfig overrides for a pretrained model (``lmgym train --model``), with LoRA."""
PURE_RL_CONFIG: dict[str, Any] = {
    "learning_rate": 3e-4,  # LoRA r=16 on SmolLM2-135M: 1e-4 left its weights where they were in 24 steps (KL < 0.001)
    "estimator": "rloo",  # critic-free; with bnpo: no loss variant beat its 2-seed mean on both tasks (rewards-alone)
    "group_size": 8,  # episodes per task: 8 gives a group a reward spread at success rates of 5-60%
    "episodes_per_update": 64,
    "mini_batch_size": 8,  # 8 optimizer steps an update; 16 at once with sampled replies of ~200 tokens
    "gradient_accumulation_steps": 1,  # took SmolLM2-135M's update to 14 GiB (23 GiB: killed)
    "n_epochs": 1,
    "kl_coef": 0.0,
    "whiten_advantages": False,  # RLOO's own baseline; whitening would scale a near-empty batch's noise up
    "rollout": {"generation_kwargs": {"temperature": 0.7}},  # at 1, SmolLM2's samples succeeded a third as often
}
"""PPOConfig overrides for a pretrained model trained from rewards alone (no oracle to warm-start
from, or ``--warmstart-steps 0``), with LoRA: measured in docs/results/rewards-alone.md."""
PURE_RL_MODEL: dict[str, Any] = {"gradient_checkpointing": True, "forward_batch_size": 8}
"""The pure-RL recipe's model settings: with them its update peaked at 5.5 GiB instead of 14 (SmolLM2-135M,
replies of up to 168 tokens, 2 cores), no slower."""
PURE_RL_PROBE_TOKENS = 256
"""The turn budget the pure-RL recipe samples the model's own replies with, before it sizes its own."""
PRETRAINED_LORA: dict[str, Any] = {"r": 16}
PRETRAINED_WARMSTART_STEPS = 30
DEFAULT_EPISODES = 4096
"""The most episodes a run without ``--episodes`` trains (the built-in envs' default runs)."""
PURE_RL_MIN_UPDATES = 8
"""The fewest updates a run from rewards alone sizes itself to, past ``PRETRAINED_MINUTES`` where
they do not fit: every such run in the docs that learned took 6-10 updates, and the README's
command typed as is, sized to 20 minutes, got 4 (SmolLM2-135M on ``chain_sum``, 2 cores)."""
PRETRAINED_MINUTES = 20
"""Minutes of training (updates and their evaluations) ``lmgym train --model`` sizes its episode
budget to when ``--episodes`` is not given (from the first update's time on this machine): the
README's real-model command then ends within about 45 minutes on a 2-core machine, the warm
start and the two full evaluations included."""


@dataclass(frozen=True)
class Recipe:
    """What ``lmgym train --model`` picks for a pretrained model on an env (``pretrained_recipe``)."""

    config: dict[str, Any] = field(default_factory=dict)
    """``PPOConfig`` keyword arguments (groups as dicts), LoRA as ``model={"peft_config": ...}``."""
    warmstart_steps: int = 0
    """Supervised steps on the env's oracle before RL (0 where the env has no oracle)."""
    max_action_tokens: int | None = None
    """The turn budget in the model's tokens, sized from the task (``None``: the env's own)."""
    max_episode_steps: int | None = None
    """Turns an episode may take, sized from the task (``None``: the env's registered limit):
    a model that keeps calling a tool stops there instead of filling the context."""
    episodes: int | None = None
    """Training episodes (``None``: as many as fit ``PRETRAINED_MINUTES`` here, sized from the first update)."""
    pure: bool = False
    """From rewards alone (no demonstrations): ``PURE_RL_CONFIG``, and the turn budget sized from
    the model's own sampled replies (``reply_budget``) where the env arguments do not set one."""

    def describe(self, config: PPOConfig) -> str:
        """The recipe in one line, with ``config``'s values (the flags' where they were given)."""
        lora = config.model.peft_config
        pure = f"from rewards alone: {config.estimator} in groups of {config.group_size}, temperature "
        budget = "the turn budget from the model's sampled replies" if self.pure else "the env's budget"
        return ", ".join(
            [
                f"LoRA r={lora.get('r', 8)}" if lora else "full fine-tuning",
                f"learning_rate {config.learning_rate:g}",
                f"warm start {self.warmstart_steps} steps on the oracle"
                if self.warmstart_steps
                else pure + f"{config.rollout.temperature:g}"
                if self.pure
                else "no warm start",
                f"kl_coef {config.kl_coef:g}",
                f"{config.episodes_per_update} episodes an update",
                f"{config.n_epochs} epoch{'s' if config.n_epochs != 1 else ''}",
                f"max_action_tokens {self.max_action_tokens}" if self.max_action_tokens else budget,
                f"max_episode_steps {self.max_episode_steps}" if self.max_episode_steps else "the env's turn limit",
                f"{self.episodes} episodes"
                if self.episodes
                else f"episodes: at least {PURE_RL_MIN_UPDATES} updates, more where they fit {PRETRAINED_MINUTES} "
                "min here (the time is estimated next, and measured at the first update)"
                if self.pure
                else f"episodes: what fits about {PRETRAINED_MINUTES} min here, sized from the first update",
            ]
        )


def pretrained_recipe(env: gym.Env, tokenizer: Any, lora: bool | None = None, warmstart: int | None = None) -> Recipe:
    """The settings for training a pretrained model on ``env`` (made as the run plays it, with the
    model's tokenizer): LoRA when peft is installed (``lora=False``: full fine-tuning, at TRL's
    learning rate), a warm start of ``PRETRAINED_WARMSTART_STEPS`` where the env has an oracle,
    and the budgets of ``action_budget`` (the turns only where they are fewer than the env's limit).
    Where the env has no oracle, or ``warmstart=0`` asks for none, RL from rewards alone
    (``PURE_RL_CONFIG``, ``pure=True``: its turn budget is sized later, from the model's replies).

    Example:
        >>> import lmgym
        >>> env = gym.make("lmgym/Calculator-v0")
        >>> recipe = pretrained_recipe(env, env.get_wrapper_attr("tokenizer"), lora=False)
        >>> recipe.warmstart_steps, recipe.max_action_tokens, recipe.max_episode_steps, recipe.config["learning_rate"]
        (30, 64, None, 1.41e-05)
    """
    lora = importlib.util.find_spec("peft") is not None if lora is None else lora
    config = {**PRETRAINED_CONFIG, "model": {"peft_config": dict(PRETRAINED_LORA) if lora else None}}
    if not lora:
        config["learning_rate"] = PPOConfig.learning_rate  # all weights move: TRL's rate for them
    budget = action_budget(env, tokenizer) if warmstart != 0 else None
    if budget is None:
        model = {**config["model"], **PURE_RL_MODEL}
        rate = PURE_RL_CONFIG["learning_rate"] if lora else config["learning_rate"]
        return Recipe({**config, **PURE_RL_CONFIG, "learning_rate": rate, "model": model}, 0, pure=True)
    limit = getattr(env.spec, "max_episode_steps", None) if env.spec else None
    turns = budget[1] if limit is None or budget[1] < limit else None
    return Recipe(config, PRETRAINED_WARMSTART_STEPS, budget[0], turns)


class BudgetTooShort(ValueError):
    """A turn budget the env was given is shorter than its oracle's turns (``action_budget``)."""


def action_budget(env: gym.Env, tokenizer: Any, seeds: range = range(16), turns: int = 32) -> tuple[int, int] | None:
    """Budgets for ``env`` from its task, as its oracle plays ``seeds``: tokens a turn (in
    ``tokenizer``'s tokens: twice the oracle's longest turn plus 16, at least 32, a multiple of
    8) and turns an episode (twice the oracle's most, at least 2; it plays at most ``turns``).
    ``None`` when the env has no oracle. ``BudgetTooShort`` where the env's own turn budget is shorter
    than an oracle's turn (a warm start's demonstrations would not fit)."""
    longest, most, room = 0, 0, getattr(env.action_space, "max_length", None)
    for seed in seeds:
        env.reset(seed=seed)
        for turn in range(1, turns + 1):
            try:
                text = env.get_wrapper_attr("oracle")()
            except (NotImplementedError, AttributeError):
                return None
            ids = tokenizer.encode(text)
            if room is not None and len(ids) > room:
                raise BudgetTooShort(
                    f"max_action_tokens={room} is shorter than the env's oracle's turns ({len(ids)} tokens on "
                    f"seed {seed}): the warm start's demonstrations would not fit; raise it or pass --warmstart-steps 0"
                )
            longest, most = max(longest, len(ids)), max(most, turn)
            _, _, terminated, truncated, _ = env.step(ids)
            if terminated or truncated:
                break
    return -(-max(32, 2 * longest + 16) // 8) * 8, max(2, 2 * most)


def long_episode_budgets(env: gym.Env, tokenizer: Any, limit: int, given: dict[str, Any]) -> dict[str, int]:
    """The default model's budgets on an env of long episodes (``long_episodes``): the turn budget
    and turn limit its oracle needs (``action_budget``), each where it is less than the env's (its
    action space's length; ``limit`` turns) and not among the ``given`` env arguments; ``{}`` for
    an env without an oracle."""
    budget = action_budget(env, tokenizer)
    if budget is None:
        return {}
    sized = {}
    if budget[0] < env.action_space.max_length and "max_action_tokens" not in given:  # type: ignore[attr-defined]
        sized["max_action_tokens"] = budget[0]
    if budget[1] < limit and "max_episode_steps" not in given:
        sized["max_episode_steps"] = budget[1]
    return sized


def turn_lengths(episode: Any) -> list[list[int]]:
    """The token ids of each turn the model wrote in ``episode``."""
    mask, turns, start = episode.action_mask.tolist(), [], None
    for t, on in enumerate(mask + [False]):
        if on and start is None:
            start = t
        elif not on and start is not None:
            turns.append(episode.tokens[start:t].tolist())
            start = None
    return turns


def sampled_reply_budget(agent: Any, envs: Any, cap: int, episodes: int = 16) -> tuple[int, list[int]]:
    """The pure-RL recipe's turn budget: ``episodes`` of the model's own replies sampled through
    ``agent`` on ``envs`` (made with a turn budget of ``cap``), sized by ``reply_budget``; returns
    it with the replies' lengths."""
    batch = agent.collect(envs, episodes, group_size=1)
    lengths = [len(turn) for e in batch for turn in turn_lengths(e)]
    return reply_budget(lengths, cap), lengths


def reply_budget(lengths: list[int], cap: int) -> int:
    """A turn budget from the lengths (tokens) of a model's own sampled replies, each cut at
    ``cap``: one and a half times the 90th percentile, at least 32, a multiple of 8, at most ``cap``.

    Example:
        >>> reply_budget([10] * 9 + [40], 256), reply_budget([256] * 10, 256)
        (64, 256)
    """
    ordered = sorted(lengths) or [cap]
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return min(cap, -(-max(32, int(1.5 * p90)) // 8) * 8)


LONG_EPISODE_TURNS = 50
"""A turn limit from which the default model plays an env as one of long episodes: the text
worlds (50-100 turns), TextArena's and GEM's games (200)."""
LONG_EPISODE_BATCHES: dict[str, Any] = {
    "mini_batch_size": 4,
    "gradient_accumulation_steps": 4,
    "model": {"forward_batch_size": 4},
}
"""The default model's batches on an env of long episodes: the same 16 episodes an optimizer step,
4 at a time (a ``tw-simple`` update took 11 GB at 16, and 32 when scoring; 3.2 GB this way)."""


def long_episodes(env_id: str | None, env_kwargs: dict[str, Any] | None = None) -> bool:
    """Whether ``env_id`` (with ``env_kwargs``) has a turn limit of ``LONG_EPISODE_TURNS`` or more.

    Example:
        >>> import lmgym
        >>> long_episodes("lmgym/Calculator-v0"), long_episodes("lmgym/Calculator-v0", {"max_episode_steps": 60})
        (False, True)
    """
    if env_id is None:
        return False
    limit = (env_kwargs or {}).get("max_episode_steps", getattr(gym.spec(env_id), "max_episode_steps", None))
    return limit is not None and limit >= LONG_EPISODE_TURNS


def default_settings(env_id: str | None = None, env_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default model's ``PPOConfig`` arguments for an env: ``TINY_MODEL_CONFIG``, with
    ``LONG_EPISODE_BATCHES`` on an env of long episodes. ``PPOAgent.default`` and ``lmgym train``
    (no ``--model``) both start from it."""
    settings = dict(TINY_MODEL_CONFIG)
    if long_episodes(env_id, env_kwargs):
        model = {**settings.get("model", {}), **LONG_EPISODE_BATCHES["model"]}
        settings.update({**LONG_EPISODE_BATCHES, "model": model})
    return settings


def default_config(env_id: str | None = None, env_kwargs: dict[str, Any] | None = None, **overrides: Any) -> PPOConfig:
    """``PPOConfig`` with the default model's settings for the env (``default_settings``), then
    ``overrides`` (``PPOConfig``'s arguments; a group's dict updates the default's)."""
    settings = default_settings(env_id, env_kwargs)
    for group, value in overrides.items():
        if isinstance(value, dict) and isinstance(settings.get(group), dict):
            overrides[group] = {**settings[group], **value}
    return PPOConfig(**{**settings, **overrides})


def default_agent(
    env_id: str = "lmgym/Calculator-v0",
    env_kwargs: dict[str, Any] | None = None,
    warmstart: Any = None,
    use_cache: bool = True,
    **config: Any,
) -> tuple[Any, Any, PPOConfig]:
    """What ``PPOAgent.default`` (the agent ``lmgym train ENV_ID`` trains with no ``--model``) is
    made of: ``(model, tokenizer, config)``.

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
    return model, tokenizer, default_config(env_id, env_kwargs, **config)


__all__ = [
    "BudgetTooShort",
    "DEFAULT_EPISODES",
    "LONG_EPISODE_BATCHES",
    "LONG_EPISODE_TURNS",
    "PRETRAINED_CONFIG",
    "PRETRAINED_LORA",
    "PRETRAINED_MINUTES",
    "PURE_RL_MIN_UPDATES",
    "PRETRAINED_WARMSTART_STEPS",
    "PURE_RL_CONFIG",
    "PURE_RL_MODEL",
    "PURE_RL_PROBE_TOKENS",
    "TINY_MODEL_CONFIG",
    "Recipe",
    "action_budget",
    "default_agent",
    "default_config",
    "pretrained_recipe",
    "long_episode_budgets",
    "reply_budget",
    "sampled_reply_budget",
    "turn_lengths",
]
