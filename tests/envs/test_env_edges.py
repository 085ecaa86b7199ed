"""The env edges: every misuse gets a clear error, never a silent result or a hang."""

import math
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from helpers import registered_ids  # noqa: I001

import lmgym
from lmgym.envs.echo import EchoEnv
from lmgym.envs.prompt import PipelineEnv, PromptEnv
from lmgym.tokenizers import hub_reachable
from lmgym.wrappers import ToolUse

pytestmark = pytest.mark.timeout(600)


def encode(env, text):
    return env.get_wrapper_attr("tokenizer").encode(text)


@pytest.mark.parametrize("make", [lambda: EchoEnv(), lambda: gym.make("lmgym/Echo-v0").unwrapped])
def test_a_step_after_termination_raises_on_the_raw_env(make):
    env = make()
    with pytest.raises(gym.error.ResetNeeded, match="has not started"):
        env.step(encode(env, "x"))
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(encode(env, "x"))
    assert terminated
    with pytest.raises(gym.error.ResetNeeded, match=r"is over \(terminated\): call reset\(\) first"):
        env.step(encode(env, "x"))
    env.reset(seed=1)
    env.step(encode(env, "x"))  # a reset makes it playable again


def test_a_tool_call_after_termination_raises():
    env = gym.make("lmgym/Calculator-v0")
    env.reset(seed=0)
    *_, terminated, _, _ = env.step(encode(env, "<answer>1</answer>"))
    assert terminated
    with pytest.raises(gym.error.ResetNeeded, match=r"is over \(terminated\)"):
        env.step(encode(env, "<calc>1+1</calc>"))


def test_an_overlong_action_names_its_length_and_the_bound():
    env = gym.make("lmgym/Calculator-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action of 1000000 tokens is longer than max_action_tokens=32"):
        env.step(np.full(1_000_000, 49))
    call = encode(env, "<calc>" + "1+" * 20 + "1</calc>")
    with pytest.raises(ValueError, match=rf"action of {len(call)} tokens"):  # through ToolUse's tool branch too
        env.step(call)
    env.step(encode(env, "<calc>1+1</calc>"))  # the bound itself is fine


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1.0", None, [1.0]])
def test_a_reward_that_is_not_a_finite_number_raises_with_its_inputs(value):
    env = PromptEnv(prompts=["What is 2+2?"], reward_fn=lambda p, c, i: value)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"not a (finite )?number(.|\n)*What is 2\+2\?(.|\n)*completion: '4'"):
        env.step(encode(env, "4"))


def test_numpy_and_tensor_rewards_are_numbers():
    import torch

    for value in (np.float32(0.5), np.array(0.5), torch.tensor(0.5), True):
        env = PromptEnv(prompts=["q"], reward_fn=lambda p, c, i, v=value: v)
        env.reset(seed=0)
        assert env.step(encode(env, "a"))[1] == float(value)


def test_a_transform_that_raises_names_its_index_prompt_and_input():
    env = PipelineEnv(prompts=["Name a number:"], transforms=[lambda out: str(1 / int(out))])
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"transforms\[0\] raised ZeroDivisionError(.|\n)*Name a number(.|\n)*'0'"):
        env.step(encode(env, "0"))


def test_a_tool_that_raises_names_the_tool_input_and_prompt():
    def broken(text):
        raise KeyError(text)

    env = ToolUse(EchoEnv(max_action_tokens=32), {"broken": broken})
    prompt, _ = env.reset(seed=0)
    with pytest.raises(RuntimeError, match=r"tool 'broken' raised KeyError(.|\n)*input: 'boom'"):
        env.step(encode(env, "<broken>boom</broken>"))


def test_python_tool_reports_its_isolation_in_info():
    env = gym.make("lmgym/PythonTool-v0", timeout=5)
    env.reset(seed=0)
    _, _, _, _, info = env.step(encode(env, "<python>print(6*7)</python>"))
    assert info["tool_output"] == "42"
    assert info["tool_info"]["isolation"] in ("bwrap", "rlimits") and info["tool_info"]["returncode"] == 0


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.parametrize(
    "args",
    [
        ["play", "lmgym/Calculator-v0", "--env-arg", "max_digits=0"],
        ["play", "lmgym/Calculator-v0", "--env-arg", "no_such_arg=1"],
        ["train", "--env-arg", "max_digits=0", "--out", "/nonexistent/never-written"],
    ],
)
def test_a_bad_env_argument_is_one_line_and_exit_2(args):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad argument for lmgym/Calculator-v0" in lines[0], result.stderr


def test_plays_positional_env_arguments_are_an_alias_that_warns():
    result = cli("play", "lmgym/Calculator-v0", "max_digits=0")
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "note: lmgym play's positional KEY=VALUE is the old form: use --env-arg max_digits=0"
    assert result.returncode == 2 and "bad argument for lmgym/Calculator-v0" in lines[1]  # and it still applies


def test_an_unreachable_model_name_fails_at_once(monkeypatch):
    import os

    from lmgym.agents import PPOAgent

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reachable.cache_clear()
    try:
        with pytest.raises(ValueError, match="not a local path, the Hugging Face hub is unreachable"):
            PPOAgent("no-such-org/no-such-model")
    finally:
        hub_reachable.cache_clear()
    result = cli("train", "--model", "no-such-model-xyz", env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "could not load a tokenizer from 'no-such-model-xyz'" in result.stderr  # the recipe reads it first
    assert "the Hugging Face hub is unreachable" in result.stderr


def test_the_agent_refuses_a_turn_budget_over_the_envs_bound():
    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.agents.warmstart import tiny_gpt2

    tokenizer = lmgym.ByteTokenizer()
    agent = PPOAgent(
        tiny_gpt2(tokenizer, n_layer=1, n_embd=16), tokenizer, config=PPOConfig(rollout={"max_new_tokens": 100})
    )
    with pytest.raises(ValueError, match="max_new_tokens=100 is more than the env's max_action_tokens=32"):
        agent.collect(gym.make("lmgym/Calculator-v0"), num_episodes=1)


# ------------------------------------------------------------------ round 2: no model action crashes a step
HOSTILE = [
    "<calc>2**1700/3</calc>",
    "<calc>9**500/7</calc>",
    "<calc>1e308*10/3</calc>",
    "<calc>" + "(" * 60 + "1" + ")" * 60 + "</calc>",
    "<python>print('x' * 5000)</python>",
    "<python>print('naïve ' * 2000)</python>",
    "<answer>" + "9" * 60 + "</answer>",
    "9" * 200,
    "<calc>",
    "",
]


@pytest.mark.parametrize("env_id", registered_ids())
def test_hostile_actions_stay_inside_the_observation_space(env_id):
    env = gym.make(env_id)
    longest = env.get_wrapper_attr("max_action_tokens")
    for text in HOSTILE:
        env.reset(seed=0)
        obs, reward, *_ = env.step(encode(env, text)[:longest])
        assert env.observation_space.contains(obs), (text, len(obs))
        assert math.isfinite(reward)


@pytest.mark.parametrize("expression", ["2**1700/3", "9**500/7", "1e308*10/3"])
def test_calculator_overflow_is_an_error_result(expression):
    env = gym.make("lmgym/Calculator-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(encode(env, f"<calc>{expression}</calc>"))
    assert obs == "<result>error: result too large</result>" and reward == 0 and not (terminated or truncated)


def test_a_flooding_tool_keeps_an_async_vector_env_alive():
    envs = gym.make_vec("lmgym/PythonTool-v0", num_envs=2, vectorization_mode="async")
    try:
        envs.reset(seed=0)
        tokenizer = envs.get_attr("tokenizer")[0]
        action = np.array(tokenizer.encode("<python>print('x' * 5000)</python>"), dtype=np.int64)
        obs, *_ = envs.step((action, action))
        assert all(len(o) <= 4096 and "[cut: " in o and o.endswith("</result>") for o in obs)
        obs, _ = envs.reset(seed=1)  # still alive
        assert all(o.startswith("How") or "?" in o for o in obs)
    finally:
        envs.close()


def test_a_huge_tool_answer_is_cut_inside_the_result_tags():
    env = ToolUse(EchoEnv(max_action_tokens=32), {"big": lambda text: "y" * 100_000})
    env.reset(seed=0)
    obs, *_ = env.step(encode(env, "<big>go</big>"))
    assert len(obs) <= 4096 and obs.startswith("<result>yyy") and obs.endswith("[cut: 100000 characters]</result>")


def test_a_huge_transform_output_is_cut():
    env = PipelineEnv(transforms=[lambda text: "z" * 50_000])
    env.reset(seed=0)
    obs, *_ = env.step(encode(env, "red"))
    assert env.observation_space.contains(obs) and obs.endswith("[cut: 50000 characters]")


def test_a_prompt_longer_than_the_space_is_a_clear_error():
    with pytest.raises(ValueError, match="a prompt of 5000 characters is longer than the observation space"):
        PromptEnv(prompts=["p" * 5000]).reset(seed=0)
    env = PromptEnv(prompts=["p" * 5000], max_observation_length=8192)
    assert env.reset(seed=0)[0] == "p" * 5000 and env.observation_space.max_length == 8192


def test_a_hanging_reward_fn_ends_the_episode_with_a_timeout():
    released = threading.Event()
    env = PromptEnv(reward_fn=lambda p, c, i: released.wait(30) or 1.0, reward_timeout=0.2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(encode(env, "hi"))
    assert not released.is_set()  # the step returned while the reward function still waited
    released.set()
    assert (obs, reward, terminated, truncated) == ("", 0.0, True, False)
    assert "reward_fn did not return within 0.2 s" in info["timeout"]


def test_a_hanging_transform_ends_the_episode_with_a_timeout():
    env = PipelineEnv(transforms=[lambda text: time.sleep(30) or "next"], transform_timeout=0.2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(encode(env, "red"))
    assert (obs, reward, terminated) == ("", 0.0, True) and "transforms[0] did not return" in info["timeout"]
    with pytest.raises(ValueError, match="transform_timeout must be a positive number"):
        PipelineEnv(transform_timeout=-1)


def test_a_hanging_tool_answers_timed_out():
    env = ToolUse(EchoEnv(max_action_tokens=32), {"slow": lambda text: time.sleep(30) or "late"}, tool_timeout=0.2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(encode(env, "<slow>x</slow>"))
    assert obs == "<result>error: timed out</result>" and info["tool_timeout"] == 0.2
