"""Several seeds in one command, compared: ``lmgym train --seeds`` and ``lmgym compare``."""

import json
import os
import subprocess
import sys

import pytest

from lmgym.cli.compare import t_interval

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ARGS = ["lmgym/Echo-v0", "--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "1"]
ARGS += ["--warmstart-steps", "5", "--episodes-per-update", "8", "--episodes", "16"]


def lmgym(*args, cache):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "LMGYM_CACHE": str(cache)},
    )


def test_seeds_run_one_after_the_other_and_are_compared(tmp_path):
    out = tmp_path / "runs"
    done = lmgym("train", *ARGS, "--seeds", "0,1", "--out", str(out), cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "seed-0" / "summary.json").is_file() and (out / "seed-1" / "summary.json").is_file()
    compared = json.loads((out / "compare.json").read_text())
    after = [r["after"]["success"] for r in compared["runs"]]
    assert [r["seed"] for r in compared["runs"]] == [0, 1]
    assert compared["after"]["mean"] == pytest.approx(sum(after) / 2)
    assert compared["after"]["t95"] == pytest.approx(list(t_interval(after)))
    assert "mean (t95)" in done.stdout and (out / "compare.png").stat().st_size > 1000
    again = lmgym("compare", str(out / "seed-0"), str(out / "seed-1"), "--out", str(tmp_path / "c"), cache=tmp_path)
    assert again.returncode == 0 and json.loads((tmp_path / "c" / "compare.json").read_text()) == compared
    missing = lmgym("compare", str(tmp_path / "nowhere"), cache=tmp_path)
    assert missing.returncode == 2 and "holds no finished run" in missing.stderr


def test_the_t_interval_by_hand():
    lo, hi = t_interval([0.2, 0.4])  # mean 0.3, sample std 0.1414, n 2, t(1 dof) 12.706
    assert (lo, hi) == pytest.approx((0.3 - 12.706 * 0.1, 0.3 + 12.706 * 0.1))
    assert t_interval([0.5]) == (0.5, 0.5)
