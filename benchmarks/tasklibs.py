"""Training on the task libraries users already have: reasoning-gym, TextArena and GEM.

Runs ``lmgym train`` with the default model (a tiny Llama warm-started on the env's oracle) on
three reasoning-gym tasks of different kinds, one single-player TextArena game and one GEM game,
and prints greedy success on 200 held-out seeds before and after training, and the wall time
``lmgym train`` measured (warm start included: each run builds its own). The games' episodes are
~10x longer (their rules alone are ~600 bytes), so they get a smaller budget (``GAME_ARGS``); the
table says which.

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

GAME_ARGS = ["--episodes", "256", "--warmstart-steps", "200", "--num-envs", "16", "--episodes-per-update", "32"]
RG = "lmgym/ReasoningGym-v0"
RUNS = {
    "arithmetic": ("reasoning-gym", "basic_arithmetic", [RG, "--env-arg", "task=basic_arithmetic"]),
    "string": ("reasoning-gym", "spell_backward", [RG, "--env-arg", "task=spell_backward"]),
    "logic": ("reasoning-gym", "aiw", [RG, "--env-arg", "task=aiw"]),
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
        budget = "256 episodes, 200 warm-start steps" if "--episodes" in train_args else "defaults (4,096 episodes)"
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
