"""Agent overhead, measured side by side in one run on the same model and batch shape.

- ``collect``: generated tokens/s of ``PPOAgent.collect`` on Echo-v0 (batched generation over a
  vector env, stop strings, scoring) against a bare ``model.generate`` loop producing the same
  number of tokens with the same batch shape.
- ``update``: tokens/s of ``PPOAgent.update`` (all epochs) against a bare forward+backward of
  the same model over the same tokens, the same number of times.

    python benchmarks/throughput.py [--threads 1] [--episodes 64]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.ppo import pad_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--num-envs", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=258, n_embd=64, n_layer=2, n_head=2, n_positions=128, bos_token_id=256, eos_token_id=256)
    )
    agent = PPOAgent(model, tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(episodes_per_update=args.episodes))
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=args.num_envs, length=8, max_action_tokens=16)
    agent.collect(envs, args.num_envs)  # warm up

    start = time.perf_counter()
    batch = agent.collect(envs, args.episodes)
    t_collect = time.perf_counter() - start
    generated = sum(e.num_action_tokens for e in batch)

    prompt = torch.tensor([lmgym.ByteTokenizer().encode("Echo: abcdefgh\n")] * args.num_envs)
    per_row = max(1, generated // args.episodes)
    start = time.perf_counter()
    for _ in range(args.episodes // args.num_envs):
        agent.model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=per_row,
            min_new_tokens=per_row,
            do_sample=True,
            top_k=0,
            pad_token_id=257,
        )
    t_bare_gen = time.perf_counter() - start
    bare_tokens = per_row * args.num_envs * (args.episodes // args.num_envs)

    start = time.perf_counter()
    agent.update(batch)
    t_update = time.perf_counter() - start
    cfg = agent.config
    trained_tokens = sum(e.length for e in batch) * cfg.n_epochs

    tokens, attention = pad_batch([e.tokens for e in batch], 0)
    optimizer = torch.optim.AdamW(agent.model.parameters(), lr=1e-5)
    start = time.perf_counter()
    for _ in range(cfg.n_epochs):
        for lo in range(0, len(batch), cfg.mini_batch_size):
            out = agent.model(
                input_ids=tokens[lo : lo + cfg.mini_batch_size], attention_mask=attention[lo : lo + cfg.mini_batch_size]
            )
            out.logits.float().logsumexp(-1).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    t_bare_train = time.perf_counter() - start

    print(f"threads={args.threads} episodes={args.episodes} num_envs={args.num_envs}")
    print(
        f"collect: {generated / t_collect:8.0f} generated tokens/s   bare generate: "
        f"{bare_tokens / t_bare_gen:8.0f} tokens/s   ratio {generated / t_collect / (bare_tokens / t_bare_gen):.2f}"
    )
    print(
        f"update:  {trained_tokens / t_update:8.0f} tokens/s             bare fwd+bwd:  "
        f"{trained_tokens / t_bare_train:8.0f} tokens/s   ratio {t_bare_train / t_update:.2f}"
    )


if __name__ == "__main__":
    main()
