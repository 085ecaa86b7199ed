"""A full disk (ENOSPC) under a run, on a small tmpfs: at each write site (``metrics.csv``,
``episodes.jsonl``, a checkpoint) the run stops with a ``DiskFull`` naming the path, nothing half
written is left where a resumed run or the viewer reads, and the last good checkpoint loads;
``lmgym train`` says so in one line and resumes from it once there is room."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import gymnasium as gym
import pytest
from helpers import tiny_model

import lmgym  # noqa: F401 (registers the envs)
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.storage import DiskFull
from lmgym.tokenizers import ByteTokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def disk(tmp_path):
    """A 48 MiB tmpfs (root with CAP_SYS_ADMIN: CI runs as root; skipped elsewhere, saying why)."""
    where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:100]}): needs root")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where, room):
    """Fills the filesystem of ``where`` but for about ``room`` bytes."""
    with open(where / "ballast", "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    size = os.path.getsize(where / "ballast")
    os.truncate(where / "ballast", max(0, size - room))


class FillAt:
    """A callback that fills the disk at update ``at`` (before lmgym's own callbacks write)."""

    def __init__(self, where, at, room):
        self.where, self.at, self.room = where, at, room

    def on_update(self, agent, metrics):
        if agent.num_updates == self.at:
            fill(self.where, self.room)


def agent():
    model = tiny_model(258, 256, seed=0, n_layer=1, n_embd=32)
    run = {"checkpoint_every": 1, "record_episodes": 32}  # records of ~50 KB an update
    config = PPOConfig(seed=0, episodes_per_update=4, mini_batch_size=4, run=run)
    return PPOAgent(model, tokenizer=ByteTokenizer(), config=config)


@pytest.mark.parametrize("site, room", [("metrics.csv", 0), ("episodes.jsonl", 8 << 10), ("update-000002", 256 << 10)])
def test_a_full_disk_at_each_write_site_names_it_and_keeps_the_last_checkpoint(disk, site, room):
    run = disk / "run"
    learner = agent()
    with pytest.raises(DiskFull) as raised:
        learner.learn(
            gym.make_vec("lmgym/Echo-v0", num_envs=4),
            total_episodes=40,
            callbacks=[FillAt(disk, 2, room)],
            log_dir=run,
            checkpoint_dir=run / "checkpoints",
            progress_bar=False,
        )
    assert raised.value.filename.endswith(site), str(raised.value)
    assert f"no space left on the device to write {run}" in str(raised.value)
    assert not [p for p in run.rglob(".tmp-*")]  # nothing half written
    for line in (run / "episodes.jsonl").read_text().splitlines():
        json.loads(line)  # no half record
    (disk / "ballast").unlink()
    resumed = agent()
    resumed.learn(gym.make_vec("lmgym/Echo-v0", num_envs=4), 12, resume_from=run / "checkpoints", progress_bar=False)
    assert resumed.num_updates == 3  # from update 1's checkpoint (or 2's, when only the logs failed) on


def test_train_says_disk_full_in_one_line_and_resumes(disk, tmp_path):
    env = {**os.environ, "LMGYM_CACHE": str(tmp_path / "cache")}
    args = ["lmgym/Echo-v0", "--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "1"]
    args += ["--warmstart-steps", "5", "--episodes-per-update", "8", "--seed", "3", "--checkpoint-every", "1"]
    run = disk / "run"
    command = [sys.executable, "-m", "lmgym.cli", "train", *args, "--episodes", "200"]
    done = subprocess.run([*command, "--out", str(run)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("lmgym train: failed: disk full: no space left on the device to write "), last
    assert "the last good checkpoint is update " in last and f"--resume {run}" in last
    moved = tmp_path / "moved"  # room again: the run moved to a larger disk
    shutil.copytree(run, moved, symlinks=True)
    again = subprocess.run(
        [*command, "--out", str(moved), "--resume", str(moved)], capture_output=True, text=True, env=env
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((moved / "summary.json").read_text())["episodes"] == 200
