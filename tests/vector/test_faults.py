"""Env faults never stall or obscure a run: a step or reset that hangs, raises or returns the
wrong types, in waves (sync and concurrent vector envs) and in the overlapped rollout."""

import os
import subprocess
import sys
from pathlib import Path

import faulty_env  # noqa: F401 (registers faulty/Faulty-v0)
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from helpers import tiny_model

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.core import EnvError
from lmgym.tokenizers import ByteTokenizer
from lmgym.vector import ConcurrentVectorEnv

pytestmark = pytest.mark.timeout(900)

ROLLOUTS = ["sync", "concurrent", "overlapped"]


def agent_for(**config):
    model = tiny_model(258, 256, seed=0, n_layer=1, n_embd=32)
    return PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(seed=0, **config))


def vector(rollout, fault, seeds=(1,), num_envs=4, checker=True, **kwargs):
    make = lambda: gym.make("faulty/Faulty-v0", fault=fault, seeds=seeds, disable_env_checker=not checker)  # noqa: E731
    if rollout == "sync":
        return SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    return ConcurrentVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)


def collect(rollout, fault, num_episodes=8, seeds=(1,), checker=True, settings=None, **config):
    """``settings``: ``PPOConfig.rollout``'s, over the deadline of 0.5 s and the overlap ``rollout`` asks for."""
    rollout_config = {"step_timeout": 0.5, "overlap": rollout == "overlapped", **(settings or {})}
    agent = agent_for(rollout=rollout_config, **config)
    envs = vector(rollout, fault, seeds, checker=checker)
    try:
        return agent.collect(envs, num_episodes, seeds=list(range(num_episodes)))
    finally:
        envs.close()


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_a_hanging_step_ends_its_episode_as_truncated_and_the_rest_play_on(rollout):
    batch = collect(rollout, "hang")  # it returns: the module's timeout is the deadline
    assert len(batch) == 8 and batch.faults == {"timeouts": 1, "reset_timeouts": 0, "skipped": 0}
    (stuck,) = [e for e in batch if e.seed == 1]
    assert stuck.truncated and stuck.rewards == [0.0] and stuck.infos[-1]["timeout"] is True
    assert all(e.terminated and not e.truncated for e in batch if e.seed != 1)
    assert batch.stats()["env/timeouts"] == 1.0


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_an_env_that_raises_is_named(rollout):
    with pytest.raises(EnvError) as caught:
        collect(rollout, "raise")
    message = str(caught.value)
    assert "faulty/Faulty-v0" in message and "seed 1" in message and "turn 1" in message
    assert "step raised ZeroDivisionError: the reward function divided by zero" in message
    assert message.startswith("sub-env ") and "on the action" in message
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    assert caught.value.seed == 1 and caught.value.env_id == "faulty/Faulty-v0"


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_a_step_of_the_wrong_types_is_refused_naming_the_field(rollout):
    with pytest.raises(EnvError, match=r"seed 1.*observation: expected a value of the observation space.*int 12345"):
        collect(rollout, "types", checker=False)
    # with gym.make's env checker on, its own assertion names the field first
    with pytest.raises(EnvError, match=r"seed 1.*The `info` returned by `step\(\)` must be a python dictionary"):
        collect(rollout, "types")


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_a_reset_that_raises_is_named(rollout):
    with pytest.raises(EnvError, match=r"Faulty-v0, seed 1\): reset raised KeyError") as caught:
        collect(rollout, "reset_raise")
    assert isinstance(caught.value.__cause__, KeyError)


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_a_reset_past_its_deadline_is_retried_in_a_fresh_env(rollout):
    faulty_env.HUNG_ONCE.clear()
    batch = collect(rollout, "reset_hang_once")
    assert len(batch) == 8 and batch.faults["reset_timeouts"] == 1
    assert all(e.terminated for e in batch)  # the seed-1 episode was played in the fresh env


@pytest.mark.parametrize("rollout", ROLLOUTS)
@pytest.mark.parametrize("fault", ["raise", "types", "reset_raise", "reset_hang"])
def test_skip_drops_the_failed_episode_and_goes_on(rollout, fault):
    batch = collect(rollout, fault, settings={"on_env_error": "skip"})
    assert sorted(e.seed for e in batch) == [0, 2, 3, 4, 5, 6, 7]
    assert batch.faults["skipped"] == 1 and batch.stats()["env/skipped"] == 1.0
    assert all(e.terminated for e in batch)


def test_skip_drops_a_whole_group():
    batch = collect("concurrent", "raise", estimator="grpo", group_size=2, settings={"on_env_error": "skip"})
    assert sorted(e.seed for e in batch) == [0, 0, 2, 2, 3, 3]  # episode seeds repeat in a group
    assert batch.faults["skipped"] == 2


def test_skip_stops_past_its_limit():
    with pytest.raises(EnvError, match=r"2 of 8 episodes dropped for env errors, more than max_env_errors=0.2"):
        collect("sync", "raise", seeds=(1, 5), settings={"on_env_error": "skip", "max_env_errors": 0.2})


def test_an_abandoned_step_holding_the_shared_rng_lock_does_not_stall_the_others():
    batch = collect("concurrent", "hang_in_rng")
    assert len(batch) == 8 and batch.faults["timeouts"] == 1
    agent = agent_for(rollout={"step_timeout": 0.5})
    envs = vector("concurrent", "none")
    assert len(agent.collect(envs, 4)) == 4  # later envs take a lock the stuck thread does not hold
    envs.close()


def test_concurrent_vector_env_takes_step_timeout_itself():
    envs = ConcurrentVectorEnv(
        [lambda: gym.make("faulty/Faulty-v0", fault="hang", seeds=(1,))] * 2,
        step_timeout=0.3,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=[0, 1])
    tokenizer = envs.get_attr("tokenizer")[0]
    obs, rewards, terminated, truncated, infos = envs.step(tuple(np.array(tokenizer.encode("ab")) for _ in range(2)))
    assert terminated.tolist() == [True, False] and truncated[1]  # (TimeLimit truncates env 0 too: one step)
    assert rewards[1] == 0.0 and infos["final_info"]["timeout"][1]
    envs.close()


def test_an_async_vector_env_error_is_named():
    agent = agent_for()
    make = lambda: gym.make("faulty/Faulty-v0", fault="raise", seeds=None)  # noqa: E731
    envs = AsyncVectorEnv([make] * 2, shared_memory=False, autoreset_mode=AutoresetMode.SAME_STEP)
    with pytest.raises(EnvError, match=r"faulty/Faulty-v0.*the vector env raised ZeroDivisionError"):
        agent.collect(envs, 2)
    envs.close(terminate=True)


def test_learn_logs_the_fault_counts():
    agent = agent_for(rollout={"step_timeout": 0.5}, episodes_per_update=8)
    envs = vector("concurrent", "hang", seeds=None, num_envs=8)
    seen = []
    agent.learn(envs, total_episodes=8, callbacks=[lambda agent, metrics: seen.append(metrics)], progress_bar=False)
    assert seen[0]["env/timeouts"] == 8.0 and seen[0]["env/skipped"] == 0.0
    envs.close()


def test_step_timeout_is_a_flag_and_a_config_field():
    from lmgym.cli import build_parser
    from lmgym.cli.session import run_config
    from lmgym.cli.spec import RunSpec

    args = build_parser().parse_args(["train", "--step-timeout", "7.5", "--on-env-error", "skip"])
    config = run_config(RunSpec.from_args(args))
    assert config.rollout.step_timeout == 7.5 and config.rollout.on_env_error == "skip"
    assert PPOConfig().rollout.step_timeout == 300.0
    with pytest.raises(ValueError, match="on_env_error must be one of"):
        PPOConfig(rollout={"on_env_error": "ignore"})


def test_generation_kwargs_flag_adds_to_the_recipes_own():
    from lmgym.agents.defaults import Recipe
    from lmgym.cli import build_parser
    from lmgym.cli.session import run_config
    from lmgym.cli.spec import RunSpec

    recipe = Recipe({"rollout": {"generation_kwargs": {"temperature": 0.7}}}, 0, pure=True)
    args = build_parser().parse_args(["train", "--generation-kwargs", '{"top_k": 50}'])
    config = run_config(RunSpec.from_args(args), recipe)
    assert config.rollout.generation_kwargs == {"temperature": 0.7, "top_k": 50}
    args = build_parser().parse_args(["train", "--generation-kwargs", '{"temperature": 1.2}'])
    assert run_config(RunSpec.from_args(args), recipe).rollout.temperature == 1.2


def test_train_evaluates_on_no_more_envs_than_num_envs(monkeypatch, tmp_path):
    """A ScienceWorld env is a JVM of ~450 MB: evaluating on 50 of them beside ``--num-envs 8``
    ran a 24 GB machine out of memory."""
    from lmgym.cli import build_parser
    from lmgym.cli import train as train_cli
    from lmgym.cli.errors import RunError

    made = []

    def make_envs(spec, n, tokenizer):
        made.append(n)
        if len(made) == 2:
            raise RuntimeError("stop here")
        return gym.vector.SyncVectorEnv([lambda: gym.make("lmgym/Echo-v0", tokenizer=tokenizer)] * n)

    monkeypatch.setattr(train_cli, "make_envs", make_envs)
    argv = ["train", "lmgym/Echo-v0", "--num-envs", "4", "--warmstart-steps", "0", "--out", str(tmp_path / "run")]
    with pytest.raises(RunError, match="stop here"):
        train_cli.train(build_parser().parse_args(argv))
    assert made == [4, 4]


# ------------------------------------------------------------------------------- the CLI
def run_cli(*args):
    tests = str(Path(__file__).parents[1])  # faulty_env
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=1500, env=env
    )


@pytest.mark.slow
def test_train_names_a_failing_env_in_one_line_and_resumes_once_it_is_fixed(tmp_path, hf_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    tiny_model(len(tokenizer), tokenizer.eos_token_id, n_layer=1, n_embd=32).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "run"
    common = ["--model", str(tmp_path / "m"), "--num-envs", "4", "--eval-episodes", "4", "--eval-every", "0"]
    common += ["--episodes-per-update", "4", "--record-episodes", "0", "--warmstart-steps", "0", "--out", str(out)]
    common += ["--env-arg", "max_action_tokens=16", "--allow-no-signal"]  # a budget given: no replies sampled
    broken = run_cli(
        "train", "faulty_env:faulty/Faulty-v0", *common, "--episodes", "64",
        # after the first updates
        "--env-arg", "fault=raise", "--env-arg", "seeds=None", "--env-arg", "after_resets=32",
    )  # fmt: skip
    assert broken.returncode == 1, broken.stderr[-2000:]
    (line,) = [x for x in broken.stderr.splitlines() if x.startswith("lmgym train: failed: ")]
    assert "faulty/Faulty-v0" in line and "step raised ZeroDivisionError" in line
    assert f"traceback in {out / 'error.log'}" in line and f"--resume {out}" in line
    assert "Traceback" not in broken.stderr  # one line, the traceback is in the file
    assert "ZeroDivisionError: the reward function divided by zero" in (out / "error.log").read_text()
    assert (out / "checkpoints" / "last").exists()
    fixed = run_cli(
        "train",
        "faulty_env:faulty/Faulty-v0",
        *common,
        "--episodes",
        "16",
        "--env-arg",
        "fault=none",
        "--resume",
        str(out),
    )
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert "resumed from" in fixed.stdout and "success (greedy)" in fixed.stdout


@pytest.mark.slow
def test_an_env_failing_in_the_warm_start_is_one_line(tmp_path, hf_tokenizer_dir):
    """``--model``'s recipe plays the env's oracle (budgets, the warm start's demonstrations): an
    env that fails there is named in one line too, its traceback in ``OUT/error.log``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    tiny_model(len(tokenizer), tokenizer.eos_token_id, n_layer=1, n_embd=32).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "run"
    broken = run_cli(
        "train", "faulty_env:faulty/Faulty-v0", "--model", str(tmp_path / "m"), "--out", str(out),
        "--env-arg", "fault=raise", "--env-arg", "seeds=None", "--env-arg", "after_resets=20",
    )  # fmt: skip
    assert broken.returncode == 1, broken.stderr[-2000:]
    (line,) = [x for x in broken.stderr.splitlines() if x.startswith("lmgym train: failed: ")]
    assert "faulty/Faulty-v0" in line and "step raised ZeroDivisionError" in line and "Traceback" not in broken.stderr
    assert "ZeroDivisionError: the reward function divided by zero" in (out / "error.log").read_text()
