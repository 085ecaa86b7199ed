"""Stable-Baselines3 and stock Gymnasium wrappers over lmgym envs."""

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import FrameStackObservation, RecordEpisodeStatistics, TimeLimit
from helpers import registered_ids  # noqa: I001

import lmgym
from lmgym.wrappers import RecordTranscript, TokenizeObservation, TokenLevel

IDS = registered_ids()


def make_token_level(env_id="lmgym/Echo-v0", **kwargs):
    return TokenLevel(gym.make(env_id, **kwargs), context_tokens=16)


@pytest.mark.parametrize("env_id", IDS)
def test_token_level_passes_both_checkers(env_id):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker", reason="pip install 'lmgym[sb3]'")
    sb3_check_env = sb3_checker.check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(TokenLevel(gym.make(env_id).unwrapped, context_tokens=16), skip_render_check=True)
    sb3_check_env(make_token_level(env_id), warn=True)


def test_token_level_turn_and_reward():
    env = make_token_level("lmgym/Calculator-v0", operators="*")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (16,)
    tok = env.get_wrapper_attr("tokenizer")
    call = env.get_wrapper_attr("oracle")()
    ids = tok.encode(call)
    for t in ids[:-1]:
        assert env.step(t)[1:4] == (0.0, False, False)
    obs, reward, terminated, _, info = env.step(ids[-1])  # the stop string ends the turn
    assert info["tool"] == "calc" and reward == 0.0
    answer = env.get_wrapper_attr("oracle")()
    for t in tok.encode(answer):
        obs, reward, terminated, _, _ = env.step(t)
    assert reward == 1.0 and terminated
    with pytest.raises(ValueError, match="outside the vocabulary"):
        env.step(10_000)


def uniform_random_return(env, episodes=200, seed=0):
    rng = np.random.default_rng(seed)
    total = 0.0
    for i in range(episodes):
        env.reset(seed=seed + i)
        done = False
        while not done:
            _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
            total += r
            done = term or trunc
    return total / episodes


@pytest.mark.slow
def test_sb3_ppo_learns_token_level_echo():
    import torch

    pytest.importorskip("stable_baselines3", reason="pip install 'lmgym[sb3]'")
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    kwargs = {"length": 1, "alphabet_size": 2, "max_action_tokens": 1}
    random_return = uniform_random_return(make_token_level(**kwargs))
    model = PPO(
        "MlpPolicy",
        make_token_level(**kwargs),
        seed=0,
        n_steps=512,
        batch_size=128,
        learning_rate=3e-3,
        ent_coef=0.0,
        verbose=0,
    )
    model.learn(total_timesteps=12_000)
    trained, _ = evaluate_policy(model, make_token_level(**kwargs), n_eval_episodes=100, deterministic=True)
    assert trained > random_return + 0.4, (random_return, trained)


def test_sb3_vec_envs_step_whole_episodes():
    pytest.importorskip("stable_baselines3", reason="pip install 'lmgym[sb3]'")
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor

    for cls in (DummyVecEnv, SubprocVecEnv):
        venv = VecMonitor(cls([lambda: make_token_level(length=1, max_action_tokens=1)] * 2))
        venv.seed(0)
        obs = venv.reset()
        actions = obs[:, -2]  # the prompt ends "Echo: <letter>\n": echo the letter
        _, rewards, dones, infos = venv.step(actions)
        assert dones.all() and (rewards == 1.0).all() and all("episode" in i for i in infos)
        venv.close()


def test_gymnasium_async_over_token_level():
    envs = gym.vector.AsyncVectorEnv([lambda: make_token_level(length=1, max_action_tokens=1)] * 2)
    envs.reset(seed=[1, 2])
    words = [gym.make("lmgym/Echo-v0", length=1).unwrapped for _ in range(2)]
    expected = [w.reset(seed=s)[1]["word"] for w, s in zip(words, [1, 2])]
    obs, rewards, terminated, _, _ = envs.step(np.array([ord(c) for c in expected]))
    assert terminated.all() and list(rewards) == [1.0, 1.0]
    envs.close()


def test_tokenize_observation():
    env = TokenizeObservation(gym.make("lmgym/Calculator-v0"))
    obs, info = env.reset(seed=0)
    assert info["observation_ids"] == lmgym.ByteTokenizer().encode(obs)
    obs, *_, info = env.step(lmgym.ByteTokenizer().encode("<calc>1+1</calc>"))
    assert info["observation_ids"] == lmgym.ByteTokenizer().encode("<result>2</result>")


def test_frame_stack_time_limit_and_statistics_compose():
    env = RecordEpisodeStatistics(FrameStackObservation(TimeLimit(gym.make("lmgym/GuessNumber-v0").unwrapped, 10), 3))
    obs, _ = env.reset(seed=0)
    assert len(obs) == 3 and obs[-1].startswith("Guess my number")
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(lmgym.ByteTokenizer().encode(env.unwrapped.oracle()))
        done = terminated or truncated
    assert terminated and obs[-1] == "correct\n" and obs[-2] in ("higher\n", "lower\n")
    assert info["episode"]["r"] > 0.5


def test_record_transcript(tmp_path):
    path = tmp_path / "t.jsonl"
    env = RecordTranscript(gym.make("lmgym/Calculator-v0", operators="*"), path)
    for seed in (0, 1):
        env.reset(seed=seed)
        done = False
        while not done:
            *_, terminated, truncated, _ = env.step(lmgym.ByteTokenizer().encode(env.get_wrapper_attr("oracle")()))
            done = terminated or truncated
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["seed"] for r in records] == [0, 1]
    assert records[0]["actions"][0].startswith("<calc>") and records[0]["observations"][0].startswith("<result>")
    assert records[0]["rewards"] == [0.0, 1.0] and records[0]["return"] == 1.0 and records[0]["terminated"]
    assert records[0]["transcript"].startswith(records[0]["prompt"])
