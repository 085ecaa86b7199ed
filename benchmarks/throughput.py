"""Agent overhead, measured side by side in one run on the same model and batch shape.

- ``collect``: generated tokens/s of ``PPOAgent.collect`` on Echo-v0 (batched generation over a
  vector env, stop checks, env steps, scoring) against a bare ``model.generate`` loop producing
  the same number of tokens with the same batch shape.
- ``update``: tokens/s of ``PPOAgent.update`` (all epochs) against a bare forward+backward+AdamW
  of the same model over the same tokens, the same number of times.
- turns: time per episode of an episode of K model calls (Pipeline-v0, K = 1, 2, 4, 8) with the
  HF engine's KV cache kept across turns and with the whole history prefilled every turn.

Each pair is measured interleaved (A B A B ...) and the medians of ``--reps`` are printed.
``--beside COMMIT`` instead times one agent iteration (``collect`` then ``update``, the same
seeded model, envs and batch) of this tree and of ``COMMIT`` (a git worktree of it), each in a
subprocess of its own, interleaved, and prints the medians and their ratio.

    python benchmarks/throughput.py [--threads 1] [--episodes 64] [--reps 5] [--beside 741a07e]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.trajectories import pad_batch


def tiny(n_positions: int = 128) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=258, n_embd=64, n_layer=2, n_head=2, n_positions=n_positions, bos_token_id=256, eos_token_id=256
    )
    return GPT2LMHeadModel(config)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_round(agent: PPOAgent, envs: gym.vector.VectorEnv, args: argparse.Namespace) -> dict[str, float]:
    """One interleaved round: seconds for collect (KL on, then off), the bare generate of as many
    tokens, update, and the bare fwd+bwd+AdamW of the same tokens; plus the token counts."""
    cfg, out = agent.config, {}
    start = time.perf_counter()
    batch = agent.collect(envs, args.episodes)
    out["collect"] = time.perf_counter() - start
    agent.kl_controller.value = 0.0  # kl_coef=0 (TRL's beta=0): no reference forward
    out["collect_no_kl"] = timed(lambda: agent.collect(envs, args.episodes))
    agent.kl_controller.value = cfg.kl_coef
    out["generated"] = generated = sum(e.num_action_tokens for e in batch)
    per_row = max(1, generated // args.episodes)
    prompt = torch.tensor([lmgym.ByteTokenizer().encode("Echo: abcdefgh\n")] * args.num_envs)
    kwargs = dict(max_new_tokens=per_row, min_new_tokens=per_row, do_sample=True, top_k=0, pad_token_id=257)
    start = time.perf_counter()
    for _ in range(args.episodes // args.num_envs):
        agent.model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    out["bare_generate"] = (time.perf_counter() - start) * generated / (per_row * args.episodes)
    out["update"] = timed(lambda: agent.update(batch))
    out["trained"] = sum(e.length for e in batch) * cfg.n_epochs
    tokens, attention = pad_batch([e.tokens for e in batch], 0)
    optimizer = torch.optim.AdamW(agent.model.parameters(), lr=1e-5)
    start = time.perf_counter()
    for _ in range(cfg.n_epochs):
        for lo in range(0, len(batch), cfg.mini_batch_size):
            rows = slice(lo, lo + cfg.mini_batch_size)
            agent.model(input_ids=tokens[rows], attention_mask=attention[rows]).logits.float().logsumexp(
                -1
            ).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    out["bare_train"] = time.perf_counter() - start
    return out


def overhead(args: argparse.Namespace) -> None:
    agent = PPOAgent(tiny(), tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(episodes_per_update=args.episodes))
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=args.num_envs, length=8, max_action_tokens=16)
    agent.collect(envs, args.num_envs)  # warm up
    rounds = [one_round(agent, envs, args) for _ in range(args.reps)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    generated, trained = med["generated"], med["trained"]
    print(f"threads={args.threads} episodes={args.episodes} num_envs={args.num_envs}, medians of {args.reps}")
    print(
        f"collect: {generated / med['collect']:8.0f} generated tokens/s   bare generate: "
        f"{generated / med['bare_generate']:8.0f} tokens/s   ratio {med['bare_generate'] / med['collect']:.2f}"
    )
    print(
        f"collect, kl_coef=0 (no reference forward): {generated / med['collect_no_kl']:8.0f} generated tokens/s"
        f"   ratio {med['bare_generate'] / med['collect_no_kl']:.2f}"
    )
    print(
        f"update:  {trained / med['update']:8.0f} tokens/s             bare fwd+bwd:  "
        f"{trained / med['bare_train']:8.0f} tokens/s   ratio {med['bare_train'] / med['update']:.2f}"
    )


def turns(args: argparse.Namespace) -> None:
    """ms per episode of K model calls, KV cache kept across turns vs the history prefilled each turn."""
    prompt = "Read this, then answer in a few words. " * 6  # ~240 tokens of history before the first turn
    agents = {
        reuse: PPOAgent(tiny(1024), tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(engine={"reuse_kv_cache": reuse}))
        for reuse in (True, False)
    }
    print(f"\nturns: ms per episode (Pipeline-v0, {args.num_envs} envs, <= 16 tokens a turn, ~30-token observations)")
    print("| model calls | KV cache kept | history re-prefilled | speed-up |")
    print("| ---: | ---: | ---: | ---: |")
    for k in (1, 2, 4, 8):
        steps = [lambda out, i=i: f"\nThat was turn {i}. Once more, please: " for i in range(k - 1)]
        envs = gym.make_vec(
            "lmgym/Pipeline-v0",
            num_envs=args.num_envs,
            prompts=[prompt],
            transforms=steps,
            max_action_tokens=16,
        )
        times: dict[bool, list[float]] = {True: [], False: []}
        for rep in range(args.reps + 1):
            for reuse, agent in agents.items():
                torch.manual_seed(rep)
                t = timed(lambda a=agent, e=envs: a.collect(e, args.num_envs))
                if rep:  # the first round warms up
                    times[reuse].append(1000 * t / args.num_envs)
        cached, fresh = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {k} | {cached:.1f} | {fresh:.1f} | {fresh / cached:.2f}x |")


ITERATION = """
import statistics, sys, time
import gymnasium as gym, torch
sys.path.insert(0, sys.argv[1])
import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from transformers import GPT2Config, GPT2LMHeadModel
torch.set_num_threads(int(sys.argv[2]))
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=258, n_embd=64, n_layer=2, n_head=2, n_positions=128,
                                   bos_token_id=256, eos_token_id=256))
agent = PPOAgent(model, tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(seed=0, learning_rate=1e-3))
envs = gym.make_vec("lmgym/Echo-v0", num_envs=16, vectorization_mode="sync", tokenizer=agent.tokenizer)
times = {"collect": [], "update": []}
for _ in range(int(sys.argv[3]) + 1):
    start = time.perf_counter(); batch = agent.collect(envs, int(sys.argv[4])); middle = time.perf_counter()
    agent.update(batch); end = time.perf_counter()
    times["collect"].append(middle - start); times["update"].append(end - middle)
assert lmgym.__file__.startswith(sys.argv[1]), lmgym.__file__  # the tree asked for, not the installed one
print("RESULT", statistics.median(times["collect"][1:]), statistics.median(times["update"][1:]))
"""


def beside(args: argparse.Namespace) -> None:
    """This tree's collect and update beside ``args.beside``'s, each in its own subprocess, interleaved."""
    import pathlib
    import subprocess
    import sys
    import tempfile

    here = pathlib.Path(__file__).resolve().parents[1]
    old = pathlib.Path(tempfile.mkdtemp(prefix="lmgym-beside-")) / "tree"
    subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(old), args.beside], check=True)
    try:
        results: dict[str, list[tuple[float, float]]] = {"before": [], "now": []}
        for _ in range(args.reps):
            for name, tree in (("before", old), ("now", here)):
                command = [sys.executable, "-c", ITERATION, str(tree), str(args.threads), "3", str(args.episodes)]
                out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tree).stdout
                line = next(s for s in out.splitlines() if s.startswith("RESULT"))
                results[name].append(tuple(map(float, line.split()[1:])))  # type: ignore[arg-type]
        shape = f"{args.episodes} Echo-v0 episodes, {args.threads} thread(s)"
        print(f"| {shape} | before ({args.beside}) | now | now/before |")
        print("| --- | ---: | ---: | ---: |")
        stages = {"collect": lambda r: r[0], "update": lambda r: r[1], "collect + update": lambda r: r[0] + r[1]}
        for stage, part in stages.items():  # scoring moved from collect into update: their sum is the iteration
            b, n = (statistics.median(part(r) for r in results[k]) for k in ("before", "now"))
            print(f"| {stage} s | {b:.3f} | {n:.3f} | {n / b:.2f}x |")
    finally:
        subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(old)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--beside", default=None, metavar="COMMIT", help="time collect and update beside COMMIT's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.beside:
        beside(args)
        return
    overhead(args)
    turns(args)


if __name__ == "__main__":
    main()
