"""One source of run defaults: ``PPOAgent.default(env)`` and ``lmgym train env`` (no ``--model``)
train with the same ``PPOConfig``, on a short-episode env and on one of long episodes."""

import dataclasses

import pytest

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent
from lmgym.agents.defaults import LONG_EPISODE_BATCHES, long_episodes
from lmgym.agents.warmstart import WarmStartConfig
from lmgym.cli import build_parser
from lmgym.cli.session import default_budgets, run_config
from lmgym.cli.spec import RunSpec


def cli_config(*argv):
    spec = RunSpec.from_args(build_parser().parse_args(["train", *argv]))
    spec = default_budgets(spec)
    return dataclasses.replace(spec, config=run_config(spec)).config


@pytest.mark.parametrize(
    "env_id,env_kwargs", [("lmgym/Calculator-v0", {}), ("lmgym/Calculator-v0", {"max_episode_steps": 60})]
)
def test_the_python_api_and_the_cli_train_with_the_same_config(env_id, env_kwargs):
    tiny = WarmStartConfig(steps=1, demonstrations=2, n_layer=1, n_embd=16)
    agent = PPOAgent.default(env_id, env_kwargs=env_kwargs, warmstart=tiny, use_cache=False)
    args = [f"--env-arg=max_episode_steps={v}" for k, v in env_kwargs.items()]
    assert agent.config.settings() == cli_config(env_id, *args).settings()
    assert long_episodes(env_id, env_kwargs) == bool(env_kwargs)
    if env_kwargs:  # the long-episode batches, in both
        assert agent.config.mini_batch_size == LONG_EPISODE_BATCHES["mini_batch_size"] == 4
        assert agent.config.model.forward_batch_size == 4 and agent.config.gradient_accumulation_steps == 4


def test_a_turn_budget_shorter_than_the_oracles_turns_is_named():
    import gymnasium as gym

    from lmgym.agents.defaults import action_budget
    from lmgym.tokenizers import ByteTokenizer

    tokenizer = ByteTokenizer()
    assert action_budget(gym.make("lmgym/Calculator-v0", tokenizer=tokenizer), tokenizer) == (64, 4)
    with pytest.raises(ValueError, match=r"max_action_tokens=4 is shorter than the env's oracle's turns \(\d+ tokens"):
        action_budget(gym.make("lmgym/Calculator-v0", tokenizer=tokenizer, max_action_tokens=4), tokenizer)
