"""What a rollout waits for when the model calls the sandboxed Python tool.

Prints, measured side by side in one run (medians of ``--repeats``):
- one ``PythonTool().run`` call, and one bare ``python -I -c`` start;
- one vector step of ``--envs`` PythonTool-v0 envs that all call the tool, with Gymnasium's
  ``SyncVectorEnv`` (one call after another) and lmgym's ``ConcurrentVectorEnv`` (all at once),
  each as a ratio to ``--envs`` bare ``python -I`` starts run one after another.

    python benchmarks/tools.py [--envs 16] [--repeats 5] [--isolation auto|bwrap|rlimits]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import lmgym  # noqa: F401
from lmgym.tools.python import PythonTool
from lmgym.vector import ConcurrentVectorEnv

CODE = "print(sum(range(10)))"


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def vector_step(vec_class, n: int, isolation: str, repeats: int) -> float:
    envs = vec_class(
        [lambda: gym.make("lmgym/PythonTool-v0", isolation=isolation)] * n, autoreset_mode=AutoresetMode.SAME_STEP
    )
    tokenizer = envs.get_attr("tokenizer")[0]
    action = np.array(tokenizer.encode(f"<python>{CODE}</python>"), dtype=np.int64)
    times = []
    for r in range(repeats):
        envs.reset(seed=r)
        start = time.perf_counter()
        obs, *_ = envs.step((action,) * n)
        times.append(time.perf_counter() - start)
        assert all(o == "<result>45</result>" for o in obs), obs
    envs.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--isolation", default="auto")
    args = parser.parse_args()
    tool = PythonTool(isolation=args.isolation)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"isolation: {tool.isolation}")
    bare = median_seconds(
        lambda: subprocess.run([sys.executable, "-I", "-c", "print(1)"], check=True, capture_output=True), args.repeats
    )
    call = median_seconds(lambda: tool.run(CODE), args.repeats)
    bare_n = args.envs * bare
    sync = vector_step(SyncVectorEnv, args.envs, args.isolation, args.repeats)
    concurrent = vector_step(ConcurrentVectorEnv, args.envs, args.isolation, args.repeats)
    print(f"one PythonTool call: {1000 * call:.0f} ms; one bare python -I start: {1000 * bare:.0f} ms")
    print(f"\n| one vector step, {args.envs} tool calls | seconds | x {args.envs} bare starts |")
    print("| --- | ---: | ---: |")
    print(f"| {args.envs} bare `python -I` starts, one after another | {bare_n:.2f} | 1.00x |")
    print(f"| SyncVectorEnv | {sync:.2f} | {sync / bare_n:.2f}x |")
    print(f"| ConcurrentVectorEnv | {concurrent:.2f} | {concurrent / bare_n:.2f}x |")


if __name__ == "__main__":
    main()
