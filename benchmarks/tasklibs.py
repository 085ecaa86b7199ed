"""Training on the task libraries users already have: reasoning-gym, TextArena and GEM.

Runs ``lmgym train`` with the default model (a tiny Llama warm-started on the env's oracle) on
three reasoning-gym tasks of different kinds, one single-player TextArena game and one GEM game,
and prints greedy success on 200 held-out seeds before and after training, and the wall time
(warm start included: each run builds its own). The games' episodes are ~10x longer (their rules
alone are ~600 bytes), so they get a smaller budget (``GAME_ARGS``); the table says which.

    python benchmarks/tasklibs.py [--only NAME,...] [--out runs/tasklibs] [extra lmgym train args...]

Needs ``pip install -e ".[reasoning-gym,textarena,gem]"``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

GAME_ARGS = ["--episodes", "512", "--warmstart-steps", "200", "--num-envs", "16", "--episodes-per-update", "32"]
RUNS = {
    "arithmetic": ("reasoning-gym", "basic_arithmetic", ["lmgym/ReasoningGym-v0", "--env-arg", "task=basic_arithmetic"]),
    "string": ("reasoning-gym", "spell_backward", ["lmgym/ReasoningGym-v0", "--env-arg", "task=spell_backward"]),
    "logic": ("reasoning-gym", "aiw", ["lmgym/ReasoningGym-v0", "--env-arg", "task=aiw"]),
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
    args, extra = parser.parse_known_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    rows = []
    for name in args.only.split(","):
        library, task, train_args = RUNS[name]
        out = os.path.join(args.out, name)
        cmd = [sys.executable, "-m", "lmgym.cli", "train", *train_args, "--out", out, "--overwrite", *extra]
        start = time.perf_counter()
        done = subprocess.run(cmd)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            rows.append((library, task, None, wall, train_args))
            continue
        with open(os.path.join(out, "summary.json")) as f:
            rows.append((library, task, json.load(f), wall, train_args))
    print(
        "\n| library | task | budget | greedy success before | after | gain | wall s |\n"
        "| --- | --- | --- | ---: | ---: | ---: | ---: |"
    )
    for library, task, s, wall, train_args in rows:
        budget = "reduced (512 episodes, 200 warm-start steps)" if "--episodes" in train_args else "defaults"
        if s is None:
            print(f"| {library} | {task} | {budget} | failed | | | {wall:.0f} |")
            continue
        before, after = s["before"]["success"], s["after"]["success"]
        print(
            f"| {library} | `{task}` | {budget} | {before:.1%} | {after:.1%} | {100 * (after - before):+.1f} | "
            f"{wall:.0f} |"
        )


if __name__ == "__main__":
    main()
