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

``--model PATH`` (a HF directory or a ``.gguf`` file, e.g. SmolLM2-135M-Instruct's) trains that
model instead, with ``lmgym train``'s pretrained recipe and its chat template, on ``MODEL_RUNS``
(the calculator on ``basic_arithmetic``), and adds to each row the model's zero-shot success
(``lmgym eval`` of ``PATH`` on the same seeds, tools and budget), the tool-call rate, an
independent ``lmgym eval`` of the saved model, and the majority-answer baseline where a task has
one (``partial_credit.py``).

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


MODEL_ARGS = ["--chat-template", "--episodes", "512", "--eval-every", "4"]
"""What every ``--model`` row passes besides its env: the model's chat template, 16 updates of the
recipe's 32 episodes, a greedy evaluation every 4 updates."""
GAME_EVAL = ["--eval-episodes", "50"]  # the games' episodes are several turns of long rules
MODEL_RUNS = {
    "arithmetic": ("reasoning-gym", "basic_arithmetic", [RG, "--env-arg", "task=basic_arithmetic", "--tools", "calc"]),
    "string": ("reasoning-gym", "spell_backward", [RG, "--env-arg", "task=spell_backward"]),
    "logic": ("reasoning-gym", "syllogism", [RG, "--env-arg", "task=syllogism", "--env-arg", "partial_credit=False"]),
    "textarena": ("TextArena", "GuessTheNumber-v0", ["lmgym/TextArena-v0", "--env-arg", "game=GuessTheNumber-v0"]),
    "gem": ("GEM", "game:GuessTheNumber-v0-easy", ["lmgym/GEM-v0", "--env-arg", "env_id=game:GuessTheNumber-v0-easy"]),
}


def lmgym_eval(env_id: str, model: str, episodes: int, *args: str) -> dict | None:
    """``lmgym eval --json``'s result, or ``None`` (its error printed)."""
    cmd = [sys.executable, "-m", "lmgym.cli", "eval", env_id, "--model", model, "--episodes", str(episodes), "--json"]
    result = subprocess.run([*cmd, *args], capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stderr[-2000:])
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def model_row(name: str, model: str, out: str, extra: list[str], table_only: bool) -> dict | None:
    """One ``--model`` row: the run (``lmgym train`` with the recipe), the zero-shot evaluation of
    ``model`` with the run's env args, tools and chat template, and the saved model's own."""
    library, task, train_args = MODEL_RUNS[name]
    episodes = 50 if name in ("textarena", "gem") else 200
    if not table_only:
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "lmgym.cli", "train", *train_args, "--model", model, *MODEL_ARGS]
        cmd += [*(GAME_EVAL if episodes == 50 else []), "--out", out, "--overwrite", *extra]
        subprocess.run(cmd)
        from lmgym.agents.models import read_manifest

        manifest = read_manifest(os.path.join(out, "model"))
        env_args = [a for k, v in manifest.get("env_kwargs", {}).items() for a in ("--env-arg", f"{k}={v!r}")]
        tools = ["--tools", manifest["tools"]] if manifest.get("tools") else []
        zero_shot = lmgym_eval(train_args[0], model, episodes, "--chat-template", *tools, *env_args)
        independent = lmgym_eval(train_args[0], os.path.join(out, "model"), episodes)
        with open(os.path.join(out, "evaluations.json"), "w") as f:
            json.dump({"zero_shot": zero_shot, "independent": independent, "wall": time.perf_counter() - started}, f)
    try:
        with open(os.path.join(out, "summary.json")) as f, open(os.path.join(out, "evaluations.json")) as g:
            return {**json.load(f), **json.load(g), "library": library, "task": task, "episodes": episodes}
    except (OSError, ValueError):
        return None


def model_table(args: argparse.Namespace, extra: list[str]) -> None:
    from partial_credit import probe  # the majority-answer baseline

    names = args.only.split(",") if args.only else list(MODEL_RUNS)
    rows = [(n, model_row(n, args.model, os.path.join(args.out, n), extra, args.table)) for n in names]
    print(
        f"\n{os.path.basename(args.model)}, greedy success on held-out seeds\n\n"
        "| library | task | seeds | zero-shot | warm start | after RL | gain over pre-RL | tool calls after | "
        "independent eval | majority answer | wall min |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for name, r in rows:
        if r is None:
            print(f"| {MODEL_RUNS[name][0]} | `{MODEL_RUNS[name][1]}` | | no run | | | | | | | |")
            continue
        zero = r["zero_shot"]["success"] if r.get("zero_shot") else float("nan")
        before, after = r["before"]["success"], r["after"]["success"]
        pre = before if r["warmstart_steps"] else zero
        tools = f"{r['after']['tool_rate']:.1%}" if "--tools" in MODEL_RUNS[name][2] else "-"
        independent = f"{r['independent']['success']:.1%}" if r.get("independent") else "-"
        majority = probe(r["task"], 50)["majority"] if r["library"] == "reasoning-gym" else None
        print(
            f"| {r['library']} | `{r['task']}` | {r['episodes']} | {zero:.1%} | "
            f"{f'{before:.1%}' if r['warmstart_steps'] else '-'} | {after:.1%} | {100 * (after - pre):+.1f} | "
            f"{tools} | {independent} | {f'{majority:.0%}' if majority is not None else '-'} | {r['wall'] / 60:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/tasklibs")
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--table", action="store_true", help="only print the table of the runs already made")
    parser.add_argument("--model", default=None, help="a pretrained model (HF dir or .gguf) to train instead")
    args, extra = parser.parse_known_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}", flush=True)
    if args.model:
        args.only = None if args.only == ",".join(RUNS) else args.only
        return model_table(args, extra)
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
