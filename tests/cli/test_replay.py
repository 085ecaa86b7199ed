"""A run is a function of its config, its seed and the machine: on CPU, two runs with the same
seed write the same episodes, the same metrics (timing columns aside) and the same weights."""

import csv
import hashlib
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ARGS = ["lmgym/Echo-v0", "--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "1"]
ARGS += ["--warmstart-steps", "5", "--episodes-per-update", "8", "--episodes", "24", "--seed", "3"]


def train(out, cache, *more):
    env = {**os.environ, "LMGYM_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "train", *ARGS, *more, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def metrics(out):
    with open(out / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def weights(out):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "model").iterdir())
        if p.suffix in (".safetensors", ".pt", ".bin")
    }


@pytest.mark.parametrize("more", [(), ("--threads", "1")], ids=["default-threads", "one-thread"])
def test_two_runs_with_the_same_seed_are_identical(tmp_path, more):
    cache = tmp_path / "cache"
    train(tmp_path / "a", cache, *more)
    train(tmp_path / "b", cache, *more)
    a, b = tmp_path / "a", tmp_path / "b"
    assert metrics(a) == metrics(b) and len(metrics(a)) >= 3
    assert (a / "episodes.jsonl").read_text() == (b / "episodes.jsonl").read_text()
    assert weights(a) == weights(b) and weights(a)
