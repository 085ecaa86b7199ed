"""Resume equals no interruption: a run stopped after some update (ended at a smaller
``--episodes``, SIGTERMed, or killed) and resumed with ``--resume`` to the run's ``--episodes``
ends with the same weights and the same metrics as a run that trained straight through. A run
that ended at a smaller ``--episodes`` annealed its learning rate to that end, so it is compared
with the learning rate held (``--anneal-lr false``)."""

import csv
import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ARGS = ["lmgym/Echo-v0", "--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "1"]
ARGS += ["--warmstart-steps", "5", "--episodes-per-update", "8", "--seed", "3", "--checkpoint-every", "1"]
EPISODES = 96


def command(out, episodes, stop, *more):
    held = ["--anneal-lr", "false"] if stop == "ended" else []
    return [
        sys.executable,
        "-m",
        "lmgym.cli",
        "train",
        *ARGS,
        *held,
        "--episodes",
        str(episodes),
        "--out",
        str(out),
        *more,
    ]


def metrics(out):
    with open(out / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def weights(out):
    return hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()


def updates_logged(out):
    try:
        return sum(1 for row in metrics(out) if row.get("loss/policy"))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("stop", ["ended", "SIGTERM", "SIGKILL"])
def test_a_resumed_run_ends_as_the_uninterrupted_one(tmp_path, stop):
    env = {**os.environ, "LMGYM_CACHE": str(tmp_path / "cache")}
    straight, part = tmp_path / "straight", tmp_path / "part"
    done = subprocess.run(command(straight, EPISODES, stop), capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    if stop == "ended":
        first = subprocess.run(command(part, 24, stop), capture_output=True, text=True, env=env)
        assert first.returncode == 0, first.stderr[-2000:]
    else:
        run = subprocess.Popen(
            command(part, EPISODES, stop), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        while updates_logged(part) < 3 and run.poll() is None:
            time.sleep(0.1)  # polls the run's progress; no duration is asserted
        run.send_signal(getattr(signal, stop))
        run.communicate(timeout=600)
        assert run.returncode in (143, -signal.SIGKILL), run.returncode
    assert updates_logged(part) < EPISODES // 8  # stopped before its end
    again = subprocess.run(
        command(part, EPISODES, stop, "--resume", str(part)), capture_output=True, text=True, env=env
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed from" in again.stdout
    assert metrics(part) == metrics(straight) and len(metrics(straight)) == EPISODES // 8 + 1
    assert weights(part) == weights(straight)
