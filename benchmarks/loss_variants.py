"""The loss family measured: SmolLM2-135M-Instruct trained from rewards alone with each variant,
two seeds each (``lmgym train --seeds``), on 2-digit sums and on GuessNumber-v0 (1-20).

Each variant is ``lmgym train`` with the pure-RL recipe and the variant's flags, nothing else
changed; ``--jobs 2`` runs two variants side by side at one torch thread each (their wall times
are then upper bounds). Prints one row per variant: greedy success after RL per seed with its 95%
Wilson interval, the mean of the seeds, the sampled success per update of each seed, the wall
time, the machine. Runs already finished under ``--out`` are read, not rerun.

    python benchmarks/loss_variants.py --task sums --variants rloo,grpo,dapo,dr_grpo,gspo [--jobs 2]
    python benchmarks/loss_variants.py --task guess --variants rloo,control
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vs_trl_learning import smollm2  # benchmarks/ is on sys.path when run as a script

SUMS = (
    '{"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, "operators": ["+"], "allow_parentheses": false}'
)
TASKS = {
    "sums": ["lmgym/ReasoningGym-v0", "--env-arg", "task=basic_arithmetic", "--env-arg", f"config={SUMS}"]
    + ["--env-arg", "max_action_tokens=64", "--episodes", "512"],
    "guess": ["lmgym/GuessNumber-v0", "--env-arg", "high=20", "--env-arg", "max_action_tokens=6", "--episodes", "384"],
}
"""Each task's env and budget, as docs/results/rewards-alone.md ran them (8 and 6 updates of 64)."""
VARIANTS = {
    "rloo": [],  # the recipe as it was: RLOO, bnpo
    "grpo": ["--estimator", "grpo", "--loss-type", "grpo"],
    "dapo": ["--estimator", "grpo", "--loss-type", "dapo", "--clip-range-high", "0.28", "--dynamic-sampling", "true"],
    "dr_grpo": ["--estimator", "grpo", "--loss-type", "dr_grpo", "--scale-rewards", "none"],
    "gspo": ["--estimator", "grpo", "--loss-type", "grpo", "--importance-sampling-level", "sequence"]
    + ["--clip-range", "3e-4", "--clip-range-high", "4e-4"],
    "control": ["--reward-control", "shuffle", "--allow-no-signal"],
}
"""The flags of each variant, TRL's meanings (docs/algorithms/loss-variants.md); ``control`` is the
recipe with each batch's returns shuffled. Add a variant's flags after ``--`` to change it."""


def run(task: str, variant: str, seeds: str, out: Path, extra: list[str]) -> Path:
    where = out / task / variant
    if all((where / f"seed-{s}" / "summary.json").is_file() for s in seeds.split(",")):
        return where
    model = ["--model", smollm2(), "--chat-template", "--warmstart-steps", "0", "--threads", "1"]
    cmd = [sys.executable, "-m", "lmgym.cli", "train", *TASKS[task], *model, *VARIANTS[variant], *extra]
    cmd += ["--eval-episodes", "100", "--eval-every", "0", "--seeds", seeds, "--out", str(where), "--overwrite"]
    where.mkdir(parents=True, exist_ok=True)
    with open(where / "train.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return where


def sampled(run_dir: Path) -> list[float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [float(r["env/success"]) for r in csv.DictReader(f) if r.get("env/success")]


def row(variant: str, where: Path, seeds: list[str]) -> str:
    runs = [json.loads((where / f"seed-{s}" / "summary.json").read_text()) for s in seeds]
    after = [r["after"] for r in runs]
    per_seed = "; ".join(f"{a['success']:.1%} ({a['success_ci'][0]:.1%}-{a['success_ci'][1]:.1%})" for a in after)
    before = "; ".join(f"{r['before']['success']:.0%}" for r in runs)
    mean = sum(a["success"] for a in after) / len(after)
    curves = " / ".join(", ".join(f"{x:.0%}" for x in sampled(where / f"seed-{s}")) for s in seeds)
    wall = " / ".join(f"{r['wall_seconds'] / 60:.0f}" for r in runs)
    return f"| {variant} | {before} | {per_seed} | **{mean:.1%}** | {curves} | {wall} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="sums")
    parser.add_argument("--variants", default="rloo,grpo,dapo,dr_grpo,gspo")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--jobs", type=int, default=1, help="variants run side by side (one torch thread each)")
    parser.add_argument("--out", type=Path, default=Path("runs/loss-variants"))
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    variants = args.variants.split(",")
    with ThreadPoolExecutor(args.jobs) as pool:
        done = list(pool.map(lambda v: run(args.task, v, args.seeds, args.out, extra), variants))
    seeds = args.seeds.split(",")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, jobs {args.jobs}"
    )
    print(f"task: {' '.join(TASKS[args.task])}; greedy success on 100 held-out seeds")
    print("| variant | zero-shot | after RL, per seed (95% Wilson) | mean | sampled success per update | wall min |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for variant, where in zip(variants, done):
        print(row(variant, where, seeds))


if __name__ == "__main__":
    main()
