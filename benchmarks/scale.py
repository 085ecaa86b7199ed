"""Scale-out on Ray, measured on one machine (a simulated 3-node cluster), ratios in one run.

1. Env steps: steps/s and p50/p99 latency of one vector step of ``--envs`` envs whose step waits
   200 ms (a tool), and of envs whose step burns 50 ms of CPU, through ``ConcurrentVectorEnv``
   (threads here) and ``RayVectorEnv`` with 1, 2 and 4 actors spread over 3 simulated nodes;
   Ray's own cost of one actor call.
2. ``collect`` of ``--episodes`` PythonTool-v0 episodes (every one calls the sandboxed tool)
   through Ray env actors, against the same collect with a zero-latency stand-in tool.
3. A ``--updates``-update Calculator-v0 run of the default model with a stand-in calculator that
   answers after 200 ms, with and without the overlapped update (``overlap_update``), at equal
   episodes: wall time and the reward curve (training success per update), side by side.

    python benchmarks/scale.py [--envs 16] [--episodes 64] [--updates 16] [--only steps,collect,overlap]

Needs ``pip install -e ".[ray]"``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent
from lmgym.envs.calculator import ArithmeticEnv
from lmgym.tools import Calculator
from lmgym.vector import ConcurrentVectorEnv
from lmgym.wrappers import ToolUse

SMALL_STORE = 80 * 2**20


class WaitingEnv(gym.Env):
    """One step per episode that waits (``wait`` s) or burns CPU (``burn`` s), like a tool call."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_modes": [], "render_fps": 1}

    def __init__(self, wait: float = 0.0, burn: float = 0.0):
        self.wait, self.burn = wait, burn

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        time.sleep(self.wait)
        end = time.perf_counter() + self.burn
        while time.perf_counter() < end:
            pass
        return 1, 1.0, True, False, {}


class SlowCalculator(Calculator):
    """The calculator, answering after ``delay`` seconds (a stand-in for a slow tool)."""

    def __init__(self, delay: float):
        self.delay = delay

    def __call__(self, expression: str) -> str:
        time.sleep(self.delay)
        return super().__call__(expression)


def step_latencies(envs: gym.vector.VectorEnv, steps: int) -> list[float]:
    envs.reset(seed=0)
    out = []
    for _ in range(steps):
        start = time.perf_counter()
        envs.step(np.zeros(envs.num_envs, dtype=np.int64))
        out.append(time.perf_counter() - start)
    return out


def vector_envs(make: Any, n: int, actors: int) -> gym.vector.VectorEnv:
    from lmgym.vector import RayVectorEnv

    if actors == 0:
        return ConcurrentVectorEnv([make] * n, autoreset_mode=AutoresetMode.SAME_STEP)
    return RayVectorEnv([make] * n, envs_per_actor=n // actors, num_cpus=0.5, autoreset_mode=AutoresetMode.SAME_STEP)


def env_steps(args: argparse.Namespace) -> None:
    import ray

    print(f"\n1. one vector step of {args.envs} envs (p50 / p99 ms over {args.steps} steps; env steps/s)")
    print("| envs | step | p50 ms | p99 ms | env steps/s |\n| --- | --- | ---: | ---: | ---: |")
    for kind, make in (
        ("wait 200 ms", partial(WaitingEnv, wait=0.2)),
        ("burn 50 ms CPU", partial(WaitingEnv, burn=0.05)),
    ):
        for actors in (0, 1, 2, 4):
            envs = vector_envs(make, args.envs, actors)
            times = sorted(step_latencies(envs, args.steps))
            envs.close()
            p50, p99 = statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]
            name = f"RayVectorEnv, {actors} actor(s)" if actors else "ConcurrentVectorEnv (threads)"
            print(f"| {name} | {kind} | {1000 * p50:.0f} | {1000 * p99:.0f} | {args.envs / p50:.0f} |")

    @ray.remote(num_cpus=0.1)
    class Echo:
        def ping(self, x: int) -> int:
            return x

    actor = Echo.remote()
    ray.get(actor.ping.remote(0))
    start = time.perf_counter()
    for i in range(200):
        ray.get(actor.ping.remote(i))
    per_call = (time.perf_counter() - start) / 200 * 1000
    print(f"\nRay's cost of one actor call (a round trip, the median of 200): {per_call:.2f} ms")


def python_env(tokenizer: Any, instant: bool) -> gym.Env:
    """PythonTool-v0 as the benchmark plays it: the sandboxed tool, or a stand-in that answers at once."""
    from lmgym.envs.python_tool import PythonTaskEnv
    from lmgym.tools import PythonTool

    tool: Any = {"python": lambda code: "45\n"} if instant else [PythonTool()]
    return ToolUse(PythonTaskEnv(tokenizer=tokenizer), tool)


def tool_collect(args: argparse.Namespace) -> None:
    agent = PPOAgent.default("lmgym/PythonTool-v0", seed=0)
    print(f"\n2. collect of {args.episodes} PythonTool-v0 episodes (the default model; every one calls the tool)")
    print("| envs | tool | seconds | vs the instant stand-in |\n| --- | --- | ---: | ---: |")
    for actors in (2, 4):
        times = {}
        for name, instant in (("instant stand-in", True), ("sandboxed python", False)):
            envs = vector_envs(partial(python_env, agent.tokenizer, instant), args.envs, actors)
            agent.collect(envs, args.envs)  # warm: actors and sandboxes started
            start = time.perf_counter()
            agent.collect(envs, args.episodes)
            times[name] = time.perf_counter() - start
            envs.close()
        base = times["instant stand-in"]
        for name, seconds in times.items():
            print(f"| RayVectorEnv, {actors} actors | {name} | {seconds:.1f} | {seconds / base:.2f}x |")


def slow_calculator_env(tokenizer: Any) -> gym.Env:
    return ToolUse(ArithmeticEnv(tokenizer=tokenizer), [SlowCalculator(0.2)])


def overlap(args: argparse.Namespace) -> None:
    print(f"\n3. {args.updates} updates of Calculator-v0, 64 episodes each, the calculator answering after 200 ms")
    results = {}
    for overlapped in (False, True):
        agent = PPOAgent.default("lmgym/Calculator-v0", seed=0, rollout={"overlap_update": overlapped})
        make = partial(slow_calculator_env, agent.tokenizer)
        envs = ConcurrentVectorEnv([make] * 32, autoreset_mode=AutoresetMode.SAME_STEP)
        curve: list[float] = []
        start = time.perf_counter()
        agent.learn(envs, 64 * args.updates, callbacks=[partial(record_success, curve)], progress_bar=False)
        results[overlapped] = (time.perf_counter() - start, curve)
        envs.close()
    (plain, plain_curve), (over, over_curve) = results[False], results[True]
    print(f"wall: {plain:.0f} s in line, {over:.0f} s overlapped: {plain / over:.2f}x faster")
    print("| update | success, in line | success, overlapped |\n| ---: | ---: | ---: |")
    for i, (a, b) in enumerate(zip(plain_curve, over_curve), 1):
        print(f"| {i} | {a:.2f} | {b:.2f} |")
    last = f"{np.mean(plain_curve[-4:]):.3f} in line, {np.mean(over_curve[-4:]):.3f} overlapped"
    print(f"training success, mean of the last 4 updates: {last}")


def record_success(curve: list[float], agent: PPOAgent, metrics: dict[str, float]) -> None:
    curve.append(metrics["env/success"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--updates", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="steps,collect,overlap")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {args.threads} torch threads")
    only = args.only.split(",")
    if "steps" in only or "collect" in only:
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "object_store_memory": SMALL_STORE, "include_dashboard": False},
        )
        for _ in range(2):
            cluster.add_node(num_cpus=2, object_store_memory=SMALL_STORE)
        ray.init(address=cluster.address, log_to_driver=False)
        print(f"a simulated cluster: {len(ray.nodes())} nodes on this machine")
        if "steps" in only:
            env_steps(args)
        if "collect" in only:
            tool_collect(args)
        ray.shutdown()
        cluster.shutdown()
    if "overlap" in only:
        overlap(args)


if __name__ == "__main__":
    main()
