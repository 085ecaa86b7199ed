"""The verifiers bridge: a verifiers v1 taskset (a local task list with ``@vf.reward``, verifiers'
chat harness in its subprocess runtime) played by lmgym's agent through lmgym's local endpoint."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import tiny_gpt2
from lmgym.compat import LibraryError

pytestmark = [
    pytest.mark.timeout(1800),  # a loaded 2-core CI machine: bound by work, not by speed
    pytest.mark.skipif(
        importlib.util.find_spec("verifiers") is None,
        reason="verifiers is not installed: pip install 'lmgym[verifiers]'",
    ),
]

TASKSET = """
import verifiers.v1 as vf


class WordData(vf.TaskData):
    answer: str = ""


class WordTask(vf.Task[WordData]):
    @vf.reward
    async def said_it(self, trace) -> float:
        return float(self.data.answer in trace.last_reply)


class Words(vf.Taskset[WordTask]):
    def load(self):
        for word in ("apple", "pear", "plum"):
            yield WordTask(WordData(prompt=f"Say the word {word}.", answer=word))


__all__ = ["Words"]
"""


@pytest.fixture(scope="module")
def taskset(tmp_path_factory):
    """``lmgym_words``: an importable verifiers taskset of three tasks."""
    path = tmp_path_factory.mktemp("tasksets")
    (path / "lmgym_words.py").write_text(textwrap.dedent(TASKSET))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(path))
        mp.setenv("PYTHONPATH", os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]))
        yield "lmgym_words"


def act(env, text):
    return env.step(np.array(env.unwrapped.tokenizer.encode(text)))


def test_contract_and_the_tasks_own_reward(taskset):
    env = gym.make("lmgym/Verifiers-v0", taskset=taskset)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert obs == env.reset(seed=3)[0] and obs.startswith("Say the word ")
    word = obs.removeprefix("Say the word ").rstrip(".")
    assert env.unwrapped.oracle() == word and f'"answer": "{word}"' in info["task"]
    assert act(env, f"Sure: {word}!") == (
        "",
        1.0,
        True,
        False,
        {"reward": 1.0, "correct": True, "reply": f"Sure: {word}!"},
    )
    env.reset(seed=3)
    assert act(env, "no")[1:3] == (0.0, True)
    env.close()


def test_the_agent_trains_on_the_tokens_it_sampled(taskset):
    tok = lmgym.ByteTokenizer()
    agent = PPOAgent(tiny_gpt2(tok), tok, config=PPOConfig(episodes_per_update=4, mini_batch_size=4, seed=0))
    envs = gym.make_vec("lmgym/Verifiers-v0", num_envs=2, taskset=taskset, tokenizer=tok, max_action_tokens=24)
    batch = agent.collect(envs, num_episodes=4)
    for episode in batch:
        sampled = episode.tokens[episode.action_mask].tolist()
        text = tok.decode([t for t in sampled if t != tok.eos_token_id])
        assert episode.infos[-1]["reply"] == text  # what the harness got is what is trained on
        assert episode.rewards == [0.0] * (len(episode.rewards) - 1) + [episode.infos[-1]["reward"]]
    metrics = agent.update(batch)
    assert np.isfinite(metrics["loss/policy"])
    envs.close()


def test_an_unknown_taskset_is_one_line(taskset):
    with pytest.raises(LibraryError, match="no_such_taskset"):
        gym.make("lmgym/Verifiers-v0", taskset="no_such_taskset")


def test_lmgym_train_on_a_verifiers_taskset(taskset, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable, "-m", "lmgym.cli", "train", "lmgym/Verifiers-v0", "--env-arg", f"taskset={taskset}",
            "--env-arg", "max_action_tokens=16", "--episodes", "4", "--num-envs", "2", "--episodes-per-update", "4",
            "--mini-batch-size", "4", "--warmstart-steps", "0", "--eval-episodes", "2", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "model").is_dir() and "greedy success" in result.stdout
