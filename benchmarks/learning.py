"""The bar of the main job: the default ``lmgym train`` and its GRPO variant, measured.

Runs ``lmgym train`` (default settings) and ``lmgym train --estimator grpo`` one after the other
and prints, for each, greedy success and tool-call rate on 200 held-out seeds before and after
training, the gain in points, and the wall time. The first run builds and caches the default
model's warm start; pass ``--fresh`` to time that too (it empties the cache first).

    python benchmarks/learning.py [--fresh] [--out runs/bench] [extra lmgym train args...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--fresh", action="store_true", help="rebuild the warm start (empties the lmgym cache)")
    parser.add_argument("--estimators", default="gae,grpo")
    args, extra = parser.parse_known_args()
    if args.fresh:
        from lmgym.agents.warmstart import cache_dir

        shutil.rmtree(cache_dir() / "warmstart", ignore_errors=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    rows = []
    for estimator in args.estimators.split(","):
        out = os.path.join(args.out, estimator)
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "lmgym.cli", "train", "--estimator", estimator, "--out", out, *extra]
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - start
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        rows.append((estimator, s["before"], s["after"], wall))
    print(
        f"\n{'estimator':<10} {'success before':>15} {'success after':>14} {'gain':>7} "
        f"{'tool before':>12} {'tool after':>11} {'wall s':>7}"
    )
    for estimator, before, after, wall in rows:
        gain = 100 * (after["success"] - before["success"])
        print(
            f"{estimator:<10} {before['success']:>15.1%} {after['success']:>14.1%} {gain:>+6.1f}p "
            f"{before['tool_rate']:>12.1%} {after['tool_rate']:>11.1%} {wall:>7.0f}"
        )


if __name__ == "__main__":
    main()
