"""What a rollout waits for when the model calls the sandboxed Python tool.

Prints, measured side by side in one run (medians of ``--repeats``):
- one ``PythonTool().run`` call in a fresh sandbox and in one the pool started ahead, and one
  bare ``python -I -c`` start;
- one vector step of ``--envs`` PythonTool-v0 envs that all call the tool: Gymnasium's
  ``SyncVectorEnv`` (one call after another, no pool), lmgym's ``ConcurrentVectorEnv`` (all at
  once) without and with the warm pool, each as a ratio to ``--envs`` bare ``python -I`` starts
  run one after another;
- ``PPOAgent.collect`` of ``--episodes`` PythonTool-v0 episodes on the HF engine: the default
  model's architecture (untrained) generates every turn (up to ``--turn-tokens``) and the env
  receives its oracle's action instead (a tool call, then the answer: every episode calls the
  tool), with the real tool and with a stand-in tool that answers the same text after 0, 50
  and 200 ms, or after 0-2 s depending on the code (not run in ``SyncVectorEnv``: a minute a
  collect); in ``SyncVectorEnv``, ``ConcurrentVectorEnv``, and ``ConcurrentVectorEnv`` with the
  overlapped rollout (``PPOConfig(rollout={"overlap": True})``); ratios to the 0 ms
  stand-in in the same column.

    python benchmarks/tools.py [--envs 16] [--episodes 64] [--repeats 5] [--turn-tokens 48]
        [--isolation auto|bwrap|rlimits]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import subprocess
import sys
import time
import zlib

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.warmstart import env_special_tokens, tiny_llama
from lmgym.envs.python_tool import PythonTaskEnv
from lmgym.tokenizers import ByteTokenizer
from lmgym.tools.python import PythonTool
from lmgym.vector import ConcurrentVectorEnv
from lmgym.wrappers import ToolUse

CODE = "print(sum(range(10)))"


def median_seconds(fn, repeats: int, between=None) -> float:
    times = []
    for _ in range(repeats):
        if between:
            between()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def vector_step(vec_class, n: int, isolation: str, repeats: int, pool_size: int) -> float:
    envs = vec_class(
        [lambda: gym.make("lmgym/PythonTool-v0", isolation=isolation, pool_size=pool_size)] * n,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    tokenizer = envs.get_attr("tokenizer")[0]
    action = np.array(tokenizer.encode(f"<python>{CODE}</python>"), dtype=np.int64)
    times = []
    for r in range(repeats + 1):
        envs.reset(seed=r)
        for tool in envs.get_attr("tools"):
            tool["python"].warm()  # a generated turn's time: the pool refills
        start = time.perf_counter()
        obs, *_ = envs.step((action,) * n)
        times.append(time.perf_counter() - start)
        assert all(o == "<result>45</result>" for o in obs), obs
    envs.close()
    return statistics.median(times[1:])  # the first step filled the pools


class StandIn:
    """Answers what the real tool answered for the same code, after ``delay`` seconds."""

    name = "python"

    def __init__(self, answers: dict[str, str], delay: float):
        self.answers, self.delay = answers, delay

    def __call__(self, code: str) -> str:
        time.sleep(self.delay)
        return self.answers[code]


class Varied(StandIn):
    """The same answers after 0 to ``delay`` seconds, a fixed function of the code (crc32)."""

    def __call__(self, code: str) -> str:
        time.sleep(self.delay * (zlib.crc32(code.encode()) % 1001) / 1000)
        return self.answers[code]


class Recording:
    """The real tool, keeping what it answered (for the stand-in)."""

    name = "python"

    def __init__(self, tool: PythonTool, answers: dict[str, str]):
        self.tool, self.answers = tool, answers

    def run(self, code: str):
        result = self.tool.run(code)
        self.answers[code] = result.text
        return result

    def __call__(self, code: str) -> str:
        return self.run(code).text

    def close(self) -> None:
        self.tool.close()


class PlaysOracle(gym.ActionWrapper):
    """Whatever the model wrote, the env receives its oracle's action (a tool call, then the
    answer): every episode calls the tool, while the model still generates every turn."""

    def action(self, action):
        oracle = self.env.get_wrapper_attr("oracle")()
        return np.array(self.env.get_wrapper_attr("tokenizer").encode(oracle), dtype=np.int64)


def collect_seconds(agent, vec_class, make_tool, n: int, episodes: int, repeats: int) -> float:
    tokenizer = agent.tokenizer
    make = lambda: PlaysOracle(gym.wrappers.TimeLimit(ToolUse(PythonTaskEnv(tokenizer=tokenizer), [make_tool()]), 4))  # noqa: E731
    envs = vec_class([make] * n)
    seeds = list(range(1000, 1000 + episodes))
    agent.collect(envs, episodes, seeds=seeds)  # warm-up: pools filled, answers recorded
    seconds = median_seconds(lambda: agent.collect(envs, episodes, seeds=seeds), repeats)
    batch = agent.collect(envs, episodes, seeds=seeds)
    calls = sum(1 for e in batch.episodes for i in e.infos if "tool" in i)
    assert calls == episodes, f"{calls} tool calls in {episodes} episodes"
    envs.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--isolation", default="auto")
    parser.add_argument("--turn-tokens", type=int, default=48, help="tokens the model generates per turn, at most")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    fresh, pooled = PythonTool(isolation=args.isolation, pool_size=0), PythonTool(isolation=args.isolation)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"isolation: {fresh.isolation}")
    bare = median_seconds(
        lambda: subprocess.run([sys.executable, "-I", "-c", "print(1)"], check=True, capture_output=True), args.repeats
    )
    call = median_seconds(lambda: fresh.run(CODE), args.repeats)
    warm_call = median_seconds(lambda: pooled.run(CODE), args.repeats, between=pooled.warm)
    pooled.close()
    bare_n = args.envs * bare
    n, iso, reps = args.envs, args.isolation, args.repeats
    rows = [
        ("SyncVectorEnv, no pool", vector_step(SyncVectorEnv, n, iso, reps, 0)),
        ("ConcurrentVectorEnv, no pool", vector_step(ConcurrentVectorEnv, n, iso, reps, 0)),
        ("ConcurrentVectorEnv, warm pool (default)", vector_step(ConcurrentVectorEnv, n, iso, reps, 1)),
    ]
    print(
        f"one PythonTool call: {1000 * call:.0f} ms fresh, {1000 * warm_call:.0f} ms pooled; "
        f"one bare python -I start: {1000 * bare:.0f} ms"
    )
    print(f"\n| one vector step, {n} tool calls | seconds | x {n} bare starts |")
    print("| --- | ---: | ---: |")
    print(f"| {n} bare `python -I` starts, one after another | {bare_n:.2f} | 1.00x |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {seconds / bare_n:.2f}x |")

    tokenizer = ByteTokenizer(env_special_tokens("lmgym/PythonTool-v0"))
    torch.manual_seed(0)
    model = tiny_llama(tokenizer, n_layer=4, n_embd=128, n_head=4)
    config = lambda overlap: PPOConfig(seed=0, rollout={"max_new_tokens": args.turn_tokens, "overlap": overlap})  # noqa: E731
    agents = {overlap: PPOAgent(copy.deepcopy(model), tokenizer, config=config(overlap)) for overlap in (False, True)}
    answers: dict[str, str] = {}
    columns = [
        ("SyncVectorEnv", SyncVectorEnv, False),
        ("ConcurrentVectorEnv", ConcurrentVectorEnv, False),
        ("Concurrent, overlapped", ConcurrentVectorEnv, True),
    ]
    head = f"collect, {args.episodes} episodes, {n} envs"
    print(f"\n| {head} | " + " | ".join(f"{name} s | ratio" for name, *_ in columns) + " |")
    print("| --- |" + " ---: | ---: |" * len(columns))
    tools = [("real PythonTool, warm pool", lambda: Recording(PythonTool(isolation=iso), answers))]
    tools += [(f"stand-in, {ms} ms", lambda ms=ms: StandIn(answers, ms / 1000)) for ms in (0, 50, 200)]
    tools += [("stand-in, 0-2 s (by code)", lambda: Varied(answers, 2.0))]
    table = {}
    for name, make_tool in tools:
        table[name] = [
            None
            if vec is SyncVectorEnv and name.endswith("(by code)")
            else collect_seconds(agents[overlap], vec, make_tool, n, args.episodes, reps)
            for _, vec, overlap in columns
        ]
    base = table["stand-in, 0 ms"]
    for name, row in table.items():
        cells = ["- | -" if s is None else f"{s:.2f} | {s / b:.2f}x" for s, b in zip(row, base)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    bound = args.episodes * 0.2 / n
    print(f"\n(episodes x 200 ms / num_envs = {bound:.2f} s: what a 200 ms tool adds when the rollout waits for it)")


if __name__ == "__main__":
    main()
