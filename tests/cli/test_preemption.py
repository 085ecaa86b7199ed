"""SIGTERM (a scheduler's preemption) means checkpoint and exit: ``lmgym train`` finishes the
update it is in, checkpoints it, says so in one line and exits 143; ``--resume`` goes on from
there to the run's end."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ARGS = ["lmgym/Echo-v0", "--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "0"]
ARGS += ["--warmstart-steps", "5", "--episodes-per-update", "8", "--seed", "3"]


def updates_logged(out):
    try:
        with open(out / "metrics.csv") as f:
            return sum(1 for row in csv.DictReader(f) if row.get("loss/policy"))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("name", ["SIGTERM", "SIGUSR1"])
def test_a_preempted_run_checkpoints_exits_143_and_resumes(tmp_path, name):
    out = tmp_path / "run"
    env = {**os.environ, "LMGYM_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "lmgym.cli", "train", *ARGS, "--episodes", "80000", "--out", str(out)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while updates_logged(out) < 2 and run.poll() is None:
        time.sleep(0.2)  # polls the run's progress; no duration is asserted
    run.send_signal(getattr(signal, name))
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == 143, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"lmgym train: preempted: {name} received; update ") and f"--resume {out}" in last
    done = json.loads((out / "checkpoints" / "last" / "checkpoint.json").read_text())["num_updates"]
    assert done >= 2 and f"update {done} is checkpointed" in last
    target = (done + 2) * 8
    again = [sys.executable, "-m", "lmgym.cli", "train", *ARGS, "--episodes", str(target), "--resume", str(out)]
    resumed = subprocess.run([*again, "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == target  # the same number of updates as a run to it that was never stopped
