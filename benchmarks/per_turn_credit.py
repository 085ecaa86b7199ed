"""Where per-turn credit pays: token-level GAE on each step's score change, beside the same run
with the episode's total reward on its last turn (``--credit episode``: what trainers that reduce
an episode to one reward train on) and beside GRPO, on a TextWorld challenge and a ScienceWorld
task.

Runs ``lmgym train`` once per world and variant, each with the same seed, ``--episodes`` and
held-out games, and prints greedy success (95% Wilson interval) and mean score (the episode's
return, 95% normal interval) before and after, with the wall time. With the default model the
runs of a world share one warm start on the oracle (cached by the first); ``--model PATH`` (a HF
directory or a ``.gguf`` file) trains that model with ``lmgym train``'s pretrained recipe and its
chat template instead.

    python benchmarks/per_turn_credit.py [--worlds textworld,scienceworld] [--variants gae-turn,...]
        [--episodes 256] [--out runs/credit] [--table] [extra lmgym train args...]

``--table`` prints the table from the run directories already there (runs made in several
processes, e.g. two at ``--threads 1`` side by side on a 2-core machine).

Needs ``pip install -e ".[textworld,scienceworld]"`` and Java 17 for ScienceWorld.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from lmgym.cli.outputs import interval

WORLDS = {
    "textworld": ["lmgym/TextWorld-v0", "--env-arg", "challenge=tw-simple"],
    "scienceworld": ["lmgym/ScienceWorld-v0", "--env-arg", "task=find-non-living-thing", "--num-envs", "8"],
}
"""The worlds: TextWorld's simplest challenge (one quest of a few rooms, about 8 turns for the
oracle), and a ScienceWorld task whose gold path is 7-16 turns (8 JVMs, one per env)."""
VARIANTS = {
    "gae-turn": ["--estimator", "gae"],
    "gae-episode": ["--estimator", "gae", "--credit", "episode"],
    "grpo-turn": ["--estimator", "grpo"],
}


def cell(stats: dict) -> str:
    score = f"{stats['mean_return']:.2f}"
    if "return_ci" in stats:
        score += f" ({stats['return_ci'][0]:.2f}-{stats['return_ci'][1]:.2f})"
    return f"{stats['success']:.1%} ({interval(stats)}) | {score}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default=",".join(WORLDS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--model", default=None, help="a pretrained model (default: the embedded tiny model)")
    parser.add_argument("--out", default="runs/credit")
    parser.add_argument("--table", action="store_true", help="only print the table of the runs in --out")
    args, extra = parser.parse_known_args()
    model = ["--model", args.model, "--chat-template"] if args.model else []
    runs = [(w, v) for w in args.worlds.split(",") for v in args.variants.split(",")]
    for world, variant in runs if not args.table else []:
        out = Path(args.out) / f"{world}-{variant}"
        cmd = [sys.executable, "-m", "lmgym.cli", "train", *WORLDS[world], *VARIANTS[variant], *model]
        cmd += ["--episodes", str(args.episodes), "--out", str(out), "--overwrite", *extra]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(
        "| world | variant | episodes | success before | score before | success after | score after | wall min |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for world, variant in runs:
        path = Path(args.out) / f"{world}-{variant}" / "summary.json"
        if path.is_file():
            s = json.loads(path.read_text())
            print(
                f"| {world} | {variant} | {s['episodes']} | {cell(s['before'])} | {cell(s['after'])} "
                f"| {s['wall_seconds'] / 60:.0f} |"
            )


if __name__ == "__main__":
    main()
