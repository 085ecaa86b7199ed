"""The bar of the main job: the default ``lmgym train``, measured on several seeds.

Runs ``lmgym train`` (default settings, nothing else passed unless you add it) once per seed and
prints, for each, greedy success and tool-call rate on 200 held-out seeds before training, at
update 10 and after training, the error mix after training, and the wall time (warm start
included with ``--fresh``, which empties the warm-start cache first, so every seed builds its
own). The worst seed is the figure that counts.

    python benchmarks/learning.py [--fresh] [--seeds 0,1,2] [--out runs/bench] [extra lmgym train args...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import time


def success_at(metrics_csv: str, step: int) -> float | None:
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            if int(float(row["step"])) == step and row.get("eval/success"):
                return float(row["eval/success"])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--fresh", action="store_true", help="rebuild the warm start (empties the lmgym cache)")
    parser.add_argument("--seeds", default="0,1,2")
    args, extra = parser.parse_known_args()
    if args.fresh:
        from lmgym.agents.warmstart import cache_dir

        shutil.rmtree(cache_dir() / "warmstart", ignore_errors=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    rows = []
    for seed in args.seeds.split(","):
        out = os.path.join(args.out, f"seed{seed}")
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "lmgym.cli", "train", "--seed", seed, "--out", out, *extra]
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - start
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        rows.append((seed, summary, success_at(os.path.join(out, "metrics.csv"), 10), wall))
    print(
        "\n| seed | success before | at update 10 | after | gain | tool calls after | errors after | wall s |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
    )
    for seed, s, at10, wall in rows:
        before, after = s["before"], s["after"]
        errors = ", ".join(f"{k} {v:.1%}" for k, v in after.get("errors", {}).items() if k != "correct") or "-"
        print(
            f"| {seed} | {before['success']:.1%} | {'-' if at10 is None else f'{at10:.1%}'} | {after['success']:.1%} | "
            f"{100 * (after['success'] - before['success']):+.1f} | {after['tool_rate']:.1%} | {errors} | {wall:.0f} |"
        )
    worst = min(rows, key=lambda r: r[1]["after"]["success"])
    print(f"\nworst seed: {worst[0]}, {worst[1]['after']['success']:.1%} greedy success after training")


if __name__ == "__main__":
    main()
