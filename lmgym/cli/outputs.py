"""What ``lmgym train`` writes when it is done: the model with its manifest, the learning curve,
transcripts, ``summary.json`` and the before/after table."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from lmgym.cli.options import table
from lmgym.storage import write_aside

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent
    from lmgym.cli.spec import RunSpec


def write_outputs(spec: RunSpec, agent: PPOAgent, before: tuple, after: tuple) -> None:
    """The model (with how its env was made, for ``lmgym eval``), the curve and the transcripts."""
    from lmgym.agents.evaluation import transcript
    from lmgym.agents.plotting import plot_learning_curve

    out = spec.out
    manifest = {"env": spec.env_id, "chat_template": spec.chat_template, "system": spec.system, "tools": spec.tools}
    agent.save(out / "model", manifest={**manifest, "env_kwargs": dict(spec.env_kwargs)})  # lmgym eval applies them
    title = f"{spec.env_id}: PPO ({agent.config.estimator})"
    plot_learning_curve(out / "metrics.csv", out / "learning_curve.png", title)
    parts = []
    for name, (_, batch) in (("before", before), ("after", after)):
        parts.append(f"## {name} training (greedy, held-out seeds)\n\n")
        for episode in batch.episodes[:5]:
            text = transcript(agent, episode)
            parts.append(f"seed {episode.seed}, return {episode.return_:g}:\n\n```\n{text}\n```\n\n")
    write_aside(out / "transcripts.md", "".join(parts))


def provenance_now() -> dict[str, Any]:
    """The versions of Python, lmgym, torch and transformers, the git commit of a source checkout,
    the machine and its thread count, as they are in this process."""
    import platform
    import subprocess
    from pathlib import Path

    import torch
    import transformers

    import lmgym

    try:
        where = Path(lmgym.__file__).resolve().parents[1]
        run = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        commit = run.stdout.strip() if run.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "python": platform.python_version(),
        "lmgym": lmgym.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip() + f", {os.cpu_count()} CPUs",
        "threads": torch.get_num_threads(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }


def provenance(spec: RunSpec, agent: PPOAgent, given: RunSpec | None = None) -> dict[str, Any]:
    """What a run needs to be replayed, and whether a replay can be bit-exact: ``provenance_now``,
    the device, the full resolved config (``config.json`` has it flat) and the command as given
    (``given``, its episodes as the run picked them: ``lmgym train --replay`` runs it)."""
    from lmgym.cli.spec import spec_record

    config = agent.config
    inexact = [
        why
        for why, holds in [
            ("the vLLM engine samples in its own process and kernels", config.engine.name == "vllm"),
            ("Ray engines or env actors run in other processes", bool(config.engine.engines or spec.ray)),
            ("a GPU's kernels are not batch-invariant", agent.accelerator.device.type != "cpu"),
            ("the overlapped update collects in a thread beside the update", config.rollout.overlap_update),
        ]
        if holds
    ]
    return {
        **provenance_now(),
        "device": str(agent.accelerator.device),
        "bit_exact": not inexact,
        "not_bit_exact_because": inexact,
        "config": config.to_dict(),
        "spec": spec_record(given or spec),
    }


def report(
    spec: RunSpec,
    agent: PPOAgent,
    before: dict[str, Any],
    after: dict[str, Any],
    wall: float,
    given: RunSpec | None = None,
) -> None:
    """``summary.json`` (``given``: the command as given, for ``provenance``), and the before/after table."""
    keys = ("success", "success_ci", "tool_rate", "mean_return", "return_ci", "errors", "sampled")
    summary = {
        "env": spec.env_id,
        "model": spec.model or "default (tiny Llama, warm-started)",
        "tools": spec.tools,
        "warmstart_steps": spec.warmstart_steps,
        "before": {k: before[k] for k in keys if k in before},
        "after": {k: after[k] for k in keys if k in after},
        "reward_control": agent.config.reward_control,
        "credit": agent.config.credit,
        "loss_type": agent.config.loss_type,
        "wall_seconds": round(wall, 1),
        "seed": spec.seed,
        "episodes": agent.num_episodes,
        "estimator": agent.config.estimator,
        "provenance": provenance(spec, agent, given),
    }
    write_aside(spec.out / "summary.json", json.dumps(summary, indent=2))
    rows = [
        ["success (greedy)", f"{before['success']:.1%}", f"{after['success']:.1%}"],
        ["  95% interval", interval(before), interval(after)],
        ["tool-call rate", f"{before['tool_rate']:.1%}", f"{after['tool_rate']:.1%}"],
        ["mean return", f"{before['mean_return']:.3f}", f"{after['mean_return']:.3f}"],
    ]
    if "sampled" in before and "sampled" in after:
        k = before["sampled"]["k"]
        rows.append(
            [f"success (sampled x{k})", f"{before['sampled']['success']:.1%}", f"{after['sampled']['success']:.1%}"]
        )
        rows.append([f"pass@{k}", f"{before['sampled'][f'pass@{k}']:.1%}", f"{after['sampled'][f'pass@{k}']:.1%}"])
    print(table(["", "before", "after"], rows))
    gain, n = after["success"] - before["success"], after["episodes"]
    print(f"greedy success {gain:+.1%} ({before['success']:.1%} -> {after['success']:.1%}, {n} held-out episodes)")
    print(f"wall time {wall:.0f} s; {agent.num_episodes} episodes; outputs in {spec.out}/")
    print(f"see what training did, token by token: lmgym view {spec.out}")


def interval(stats: dict[str, Any]) -> str:
    lo, hi = stats["success_ci"]
    return f"{lo:.1%}-{hi:.1%}"


__all__ = ["report", "write_outputs"]
