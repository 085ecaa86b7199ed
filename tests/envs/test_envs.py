"""The env contract, checked over every registered lmgym id."""

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit
from helpers import registered_ids  # noqa: I001
from hypothesis import given, settings
from hypothesis import strategies as st

import lmgym
from lmgym.core import LMEnv

IDS = registered_ids()


def encode(env, text):
    return np.array(env.get_wrapper_attr("tokenizer").encode(text), dtype=np.int64)


def oracle_episode(env, seed):
    """Runs the oracle for one episode; returns (observations, rewards, terminated, truncated, infos)."""
    obs, info = env.reset(seed=seed)
    trace = [(obs, None, False, False, info)]
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(encode(env, env.get_wrapper_attr("oracle")()))
        trace.append((obs, reward, terminated, truncated, info))
        done = terminated or truncated
    return trace


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_warnings_as_errors(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_episode(env_id):
    first = oracle_episode(gym.make(env_id), seed=7)
    second = oracle_episode(gym.make(env_id), seed=7)
    assert repr(first) == repr(second)
    assert repr(oracle_episode(gym.make(env_id), seed=8)) != repr(first)


@pytest.mark.parametrize("env_id", IDS)
def test_oracle_solves_200_seeds(env_id):
    env = gym.make(env_id)
    for seed in range(200):
        trace = oracle_episode(env, seed)
        assert trace[-1][2], f"seed {seed}: not terminated"  # solved, not truncated
        assert trace[-1][4].get("correct", True) and sum(step[1] for step in trace[1:]) > 0, f"seed {seed}: {trace}"


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("autoreset", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_vector_oracle(env_id, mode, autoreset):
    envs = gym.make_vec(env_id, num_envs=4, vectorization_mode=mode, vector_kwargs={"autoreset_mode": autoreset})
    tokenizer = envs.get_attr("tokenizer")[0]
    obs, _ = envs.reset(seed=0)
    assert all(isinstance(o, str) and o.strip() for o in obs)  # real prompts, not placeholders
    finished = []
    for _ in range(12):
        actions = tuple(np.array(tokenizer.encode(t), dtype=np.int64) for t in envs.call("oracle"))
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert all(isinstance(o, str) for o in obs)
        finished += list(rewards[terminated])
    envs.close()
    assert len(finished) >= 4 and all(r > 0 for r in finished)


@pytest.mark.parametrize("env_id", IDS)
def test_stock_wrappers_and_pickle(env_id):
    spec = gym.spec(env_id)
    env = gym.make(env_id, max_episode_steps=None, disable_env_checker=True)
    env = RecordEpisodeStatistics(TimeLimit(env, max_episode_steps=spec.max_episode_steps))
    trace = oracle_episode(env, seed=3)
    assert trace[-1][4]["episode"]["r"] > 0
    clone = pickle.loads(pickle.dumps(env))
    assert clone.reset(seed=3)[0] == env.reset(seed=3)[0]


@pytest.mark.parametrize("env_id", IDS)
def test_bad_actions_raise(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    vocab = env.get_wrapper_attr("tokenizer").vocab_size
    with pytest.raises(ValueError, match=rf"token id {vocab + 5} .*vocab_size={vocab}"):
        env.step(np.array([1, vocab + 5]))
    with pytest.raises(ValueError, match="dtype"):
        env.step(np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="-1"):
        env.step([3, -1])
    with pytest.raises(ValueError, match="not text"):
        env.step("<answer>1</answer>")


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_fuzz_never_crashes(env_id, data):
    env = gym.make(env_id)
    vocab = env.get_wrapper_attr("tokenizer").vocab_size
    longest = env.get_wrapper_attr("max_action_tokens")  # longer actions raise (test_env_edges)
    env.reset(seed=data.draw(st.integers(0, 10_000)))
    for _ in range(4):
        if data.draw(st.booleans()):
            action = data.draw(st.lists(st.integers(0, vocab - 1), max_size=40))
        else:
            action = list(encode(env, data.draw(st.text(max_size=40))))
        action = action[:longest]
        obs, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(obs, str) and np.isfinite(reward) and env.observation_space.contains(obs)
        if terminated or truncated:
            env.reset()


def test_hf_tokenizer_path(hf_tokenizer_dir):
    env = gym.make("lmgym/Calculator-v0", tokenizer=hf_tokenizer_dir, operators="*")
    assert type(env.get_wrapper_attr("tokenizer")).__name__ == "HFTokenizer"
    trace = oracle_episode(env, seed=1)
    assert trace[1][0].startswith("<result>") and trace[-1][1] == 1.0


def test_calculator_readme_example():
    env = gym.make("lmgym/Calculator-v0")
    obs, _ = env.reset(seed=0)
    assert obs.startswith("What is ")
    obs, reward, terminated, truncated, info = env.step(env.unwrapped.tokenizer.encode("<calc>37*412</calc>"))
    assert (obs, reward, terminated, truncated) == ("<result>15244</result>", 0.0, False, False)
    assert env.step(encode(env, "no tags"))[0:3] == ("\nAnswer with <answer>N</answer>.\n", 0.0, False)
    assert env.step(encode(env, "<calc>x</calc>"))[0] == "<result>error: names are not allowed: x</result>"
    assert env.step(encode(env, "<answer>1</answer>"))[1:4] == (0.0, True, True)  # 4th turn: time limit too
    assert "<calc>37*412</calc><result>15244</result>" in env.unwrapped.render()
    assert gym.spec("lmgym/Calculator-v0").max_episode_steps == 4


def test_calculator_kwargs_and_truncation():
    env = gym.make("lmgym/Calculator-v0", min_digits=1, max_digits=1, operators="/")
    obs, info = env.reset(seed=5)
    a, op, b = info["expression"].split()
    assert op == "/" and int(a) % int(b) == 0 and len(b) == 1
    for _ in range(4):
        _, _, terminated, truncated, _ = env.step(encode(env, "hmm"))
    assert truncated and not terminated
    with pytest.raises(ValueError, match="operators"):
        gym.make("lmgym/Calculator-v0", operators="^")


class UnicodeEnv(LMEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "naïve café 東京", {}

    def step_text(self, text):
        return "¿qué? → " + text, 1.0, True, False, {}


def test_async_unicode_with_default_arguments():
    gym.register("lmgym_test/Unicode-v0", entry_point=UnicodeEnv)
    try:
        envs = gym.make_vec("lmgym_test/Unicode-v0", num_envs=2, vectorization_mode="async")
        assert envs.reset(seed=0)[0] == ("naïve café 東京",) * 2
        obs, rewards, *_ = envs.step((np.array([ord("ü")]), np.array([ord("x")])))
        assert obs == ("¿qué? → \ufffd", "¿qué? → x") and list(rewards) == [1.0, 1.0]
        envs.close()
    finally:
        del gym.registry["lmgym_test/Unicode-v0"]


def test_render_modes(capsys):
    env = gym.make("lmgym/Echo-v0", render_mode="human")
    env.reset(seed=0)
    env.step(encode(env, "abc"))
    out = capsys.readouterr().out
    assert out.startswith("Echo: ") and out.endswith("abc")
    ansi = gym.make("lmgym/Echo-v0", render_mode="ansi")
    ansi.reset(seed=0)
    ansi.step(encode(ansi, "abc"))
    assert ansi.render() == out


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, lmgym; print('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    assert lmgym.__version__
