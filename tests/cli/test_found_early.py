"""Bad asks are usage errors (exit 2, one line) found before anything starts, and an env whose
``close()`` hangs cannot stall a command: every close lmgym makes has a deadline."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def lmgym(*args, env=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def usage_error(done, *words):
    assert done.returncode == 2, done.stderr[-1500:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("lmgym ") and ": error: " in line and all(w in line for w in words), line


@pytest.mark.skipif((os.cpu_count() or 1) >= 64, reason="this machine has 64 CPUs: the ask can be placed")
def test_an_unplaceable_env_worker_ask_is_a_usage_error_before_ray_starts():
    started = time.monotonic()
    done = lmgym("train", "lmgym/Echo-v0", "--env-workers", "1", "--env-worker-cpus", "64", "--out", "/nonexistent/x")
    usage_error(done, "--env-worker-cpus 64", f"{os.cpu_count()} CPUs")
    assert "Ray:" not in done.stdout  # no cluster was started for it
    assert time.monotonic() - started < 60  # not Ray's placement timeout (the 19 s it took before)


def test_a_tokenizer_env_arg_is_a_usage_error():
    usage_error(lmgym("train", "lmgym/Echo-v0", "--env-arg", "tokenizer=gpt2"), "--env-arg tokenizer")


def test_a_manifest_that_passes_a_tokenizer_is_a_usage_error(tmp_path):
    manifest = {"env": "lmgym/Echo-v0", "env_kwargs": {"tokenizer": "x"}}
    (tmp_path / "lmgym_model.json").write_text(json.dumps(manifest))
    usage_error(lmgym("eval", "lmgym/Echo-v0", "--model", str(tmp_path), "--episodes", "2"), "tokenizer")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_env_whose_close_hangs_does_not_stall_train(tmp_path):
    args = ["train", "faulty_env:faulty/Faulty-v0", "--env-arg", "fault=close_hang", "--allow-no-signal"]
    args += ["--num-envs", "8", "--eval-episodes", "8", "--episodes-per-update", "8", "--episodes", "16"]
    waits = {"LMGYM_CACHE": str(tmp_path), "LMGYM_CLOSE_SECONDS": "1"}  # each hung close is waited for, then left
    done = lmgym(*args, "--warmstart-steps", "5", "--out", str(tmp_path / "run"), env=waits)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["episodes"] == 16
