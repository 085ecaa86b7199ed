"""Checkpoints are data, complete or absent, and a failed or killed write never loses the last good one."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from helpers import tiny_model

from lmgym import ByteTokenizer
from lmgym.agents import PPOAgent, PPOConfig, checkpoints
from lmgym.agents.checkpoints import CheckpointError

pytestmark = pytest.mark.timeout(900)

PARTS = ["model", "tokenizer", "value_head.pt", "lmgym_model.json", "ref_model", "training_state.pt", "checkpoint.json"]


def agent(seed=0, n_embd=32):
    model = tiny_model(258, 256, seed=seed, n_layer=1, n_embd=n_embd)
    return PPOAgent(
        model, tokenizer=ByteTokenizer(), config=PPOConfig(seed=seed, episodes_per_update=4, mini_batch_size=2)
    )


def train(a, ckpt, episodes, env_id="lmgym/Echo-v0", resume=None):
    return a.learn(
        gym.make(env_id), total_episodes=episodes, checkpoint_dir=ckpt, resume_from=resume, progress_bar=False
    )


class Killed(Exception):
    """Stands for a SIGKILL in the middle of a checkpoint write."""


@pytest.fixture
def fail_after():
    def arm(part):
        def hook(written):
            if written == part:
                raise Killed(part)

        checkpoints.AFTER_WRITE.append(hook)

    yield arm
    checkpoints.AFTER_WRITE.clear()


@pytest.mark.parametrize("part", PARTS + ["renamed", "last"])
def test_a_write_failing_after_any_part_keeps_the_last_good_checkpoint(tmp_path, fail_after, part):
    a = train(agent(), tmp_path, 4)  # update 1, complete
    good = {n: p.clone() for n, p in a.model.state_dict().items()}
    fail_after(part)
    with pytest.raises(Killed):
        train(a, tmp_path, 8)  # update 2 dies while its checkpoint is written
    checkpoints.AFTER_WRITE.clear()
    if part == "last":  # it failed after `last` was switched: update 2 is complete and current
        good, expected = {n: p.clone() for n, p in a.model.state_dict().items()}, 2
    else:  # any earlier point: `last` is still update 1 (update 2 absent, or complete but not current)
        expected = 1
        assert (tmp_path / "update-000002").exists() == (part == "renamed")
    resumed = agent(seed=1)
    path = resumed.load_training_state(tmp_path / "last", gym.make("lmgym/Echo-v0"))
    assert path.name == f"update-{expected:06d}" and resumed.num_updates == expected
    assert resumed.num_episodes == 4 * expected
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, good[name]), name  # weights, optimizer and counters from the same update


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import gymnasium as gym
    sys.path.insert(0, {tests!r})
    from helpers import tiny_model
    from lmgym import ByteTokenizer
    from lmgym.agents import PPOAgent, PPOConfig, checkpoints
    model = tiny_model(258, 256, seed=0, n_layer=1, n_embd=32)
    config = PPOConfig(seed=0, episodes_per_update=4, mini_batch_size=2)
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), config=config)
    agent.learn(gym.make("lmgym/Echo-v0"), total_episodes=4, checkpoint_dir={ckpt!r}, progress_bar=False)
    checkpoints.AFTER_WRITE.append(lambda part: part == {part!r} and os.kill(os.getpid(), signal.SIGKILL))
    agent.learn(gym.make("lmgym/Echo-v0"), total_episodes=8, checkpoint_dir={ckpt!r}, progress_bar=False)
    """
)


@pytest.mark.parametrize("part", ["model", "training_state.pt"])
def test_a_real_sigkill_mid_write_resumes_from_the_previous_checkpoint(tmp_path, part):
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parents[1]), ckpt=str(tmp_path), part=part)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1500)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    resumed = agent(seed=1)
    assert resumed.load_training_state(tmp_path, gym.make("lmgym/Echo-v0")).name == "update-000001"
    assert resumed.num_updates == 1
    train(resumed, tmp_path, 8, resume=None)  # and the run goes on, cleaning what the kill left
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-"))]


def test_only_the_two_newest_checkpoints_are_kept(tmp_path):
    a = agent()
    for total in (4, 8, 12):
        train(a, tmp_path, total)
    assert sorted(p.name for p in tmp_path.glob("update-*")) == ["update-000002", "update-000003"]
    assert os.readlink(tmp_path / "last") == "update-000003"


def test_a_checkpoint_that_runs_code_is_refused(tmp_path):
    train(agent(), tmp_path, 4)
    path = checkpoints.resolve(tmp_path)

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    state = path / "training_state.pt"
    with open(state, "wb") as f:
        pickle.dump({"optimizer": Exploit()}, f)
    manifest = json.loads((path / "checkpoint.json").read_text())  # even with a matching manifest
    manifest["files"]["training_state.pt"] = {"bytes": state.stat().st_size, "sha256": checkpoints.sha256(state)}
    (path / "checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="a checkpoint is data, never code"):
        agent().load_training_state(tmp_path / "last")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("file", ["model.safetensors", "training_state.pt"])
def test_a_damaged_file_is_named(tmp_path, file):
    train(agent(), tmp_path, 4)
    target = checkpoints.resolve(tmp_path) / file
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=f"{file}' is damaged"):
        agent().load_training_state(tmp_path)


def test_a_checkpoint_of_another_model_or_env_is_refused(tmp_path):
    train(agent(), tmp_path, 4)
    with pytest.raises(CheckpointError, match="holds another model"):
        agent(n_embd=64).load_training_state(tmp_path, gym.make("lmgym/Echo-v0"))
    with pytest.raises(CheckpointError, match="trained on another env.*lmgym/Echo-v0"):
        agent().load_training_state(tmp_path, gym.make("lmgym/GuessNumber-v0"))


def test_a_missing_or_incomplete_checkpoint_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoints.resolve(tmp_path / "nothing")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "training_state.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="incomplete"):
        checkpoints.resolve(tmp_path / "half")


def test_save_replaces_a_model_dir_only_when_complete(tmp_path, fail_after):
    a = agent()
    a.save(tmp_path / "model")
    before = (tmp_path / "model" / "model.safetensors").read_bytes()
    fail_after("value_head.pt")
    with pytest.raises(Killed):
        agent(seed=5).save(tmp_path / "model")
    assert (tmp_path / "model" / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
