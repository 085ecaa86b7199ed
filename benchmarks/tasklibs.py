"""Training on the task libraries users already have: reasoning-gym, TextArena and GEM.

Runs ``lmgym train`` with the default model (a tiny Llama warm-started on the env's oracle) on
three reasoning-gym tasks of different kinds, one single-player TextArena game and one GEM game,
and prints greedy success on held-out seeds (200) before and after training, and the wall time
``lmgym train`` measured (warm start included: each run builds its own). The games' episodes are
~10x longer than the tasks' (their rules alone are ~600 bytes), so they get a token budget
(``GAME_ARGS``); the table says which.

    python benchmarks/tasklibs.py [--only NAME,...] [--out runs/tasklibs] [--table] [extra lmgym train args...]

``--table`` prints the table from the run directories already there (runs made in several
processes, e.g. two at ``--threads 1`` side by side on a 2-core machine).

Needs ``pip install -e ".[reasoning-gym,textarena,gem]"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

GAME_ARGS = ["--episodes", "64", "--warmstart-steps", "20", "--num-envs", "16", "--episodes-per-update", "32"]
GAME_ARGS += ["--eval-episodes", "50"]
"""The games' budget: their episodes are ~1,100 byte tokens (the rules alone are ~600), and one
warm-start step of the default model on them took ~28 s here (1 thread, beside another run):
the default budget would take hours on a 2-core CPU, so these rows only show the pipeline
running end to end."""
RG = "lmgym/ReasoningGym-v0"
LONGER_ARGS = ["--warmstart-steps", "400", "--episodes", "2048"]
"""For a task whose questions are twice as long (syllogism's, ~200 bytes): a quarter of the warm
start and half the episodes, to fit a session on 2 cores."""
RUNS = {
    "arithmetic": ("reasoning-gym", "basic_arithmetic", [RG, "--env-arg", "task=basic_arithmetic"]),
    "string": ("reasoning-gym", "spell_backward", [RG, "--env-arg", "task=spell_backward"]),
    "logic": ("reasoning-gym", "syllogism", [RG, "--env-arg", "task=syllogism", *LONGER_ARGS]),
    "textarena": (
        "TextArena",
        "GuessTheNumber-v0",
        ["lmgym/TextArena-v0", "--env-arg", "game=GuessTheNumber-v0", *GAME_ARGS],
    ),
    "gem": (
        "GEM",
        "game:GuessTheNumber-v0-easy",
        ["lmgym/GEM-v0", "--env-arg", "env_id=game:GuessTheNumber-v0-easy", *GAME_ARGS],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/tasklibs")
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--table", action="store_true", help="only print the table of the runs already made")
    args, extra = parser.parse_known_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    rows = []
    for name in args.only.split(","):
        library, task, train_args = RUNS[name]
        out = os.path.join(args.out, name)
        if not args.table:
            cmd = [sys.executable, "-m", "lmgym.cli", "train", *train_args, "--out", out, "--overwrite", *extra]
            subprocess.run(cmd)
        try:
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            summary = None
        rows.append((library, task, summary, train_args))
    print(
        "\n| library | task | budget | greedy success before | after | gain | wall s |\n"
        "| --- | --- | --- | ---: | ---: | ---: | ---: |"
    )
    for library, task, s, train_args in rows:
        budget = (
            "64 episodes, 20 warm-start steps, 50 eval seeds"
            if "--eval-episodes" in train_args
            else "2,048 episodes, 400 warm-start steps"
            if "--episodes" in train_args
            else "defaults (4,096 episodes, 1,600 warm-start steps)"
        )
        if s is None:
            print(f"| {library} | `{task}` | {budget} | no run | | | |")
            continue
        before, after = s["before"]["success"], s["after"]["success"]
        print(
            f"| {library} | `{task}` | {budget} | {before:.1%} | {after:.1%} | {100 * (after - before):+.1f} | "
            f"{s['wall_seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()
