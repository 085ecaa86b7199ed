"""Evaluation on held-out seeds: success rate, tool-call rate and mean return."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from lmgym.agents.ppo import EVAL_SEED_OFFSET, PPOAgent
from lmgym.agents.trajectories import Trajectories


def held_out_seeds(n: int) -> list[int]:
    """Evaluation seeds: ``EVAL_SEED_OFFSET + i``, disjoint from every training seed."""
    return [EVAL_SEED_OFFSET + i for i in range(n)]


def evaluate(
    agent: PPOAgent, envs: gym.Env | gym.vector.VectorEnv, episodes: int = 200, greedy: bool = True
) -> tuple[dict[str, Any], Trajectories]:
    """Plays ``episodes`` held-out episodes; returns ``{"success", "tool_rate", "mean_return",
    "episodes"}`` and the episodes themselves."""
    kwargs = {"do_sample": False} if greedy else {}
    batch = agent.collect(
        envs, episodes, group_size=1, seeds=held_out_seeds(episodes), generation_kwargs=kwargs, score=False
    )
    stats = batch.stats()
    return {
        "success": stats["env/success"],
        "tool_rate": stats["env/tool_rate"],
        "mean_return": float(np.mean(batch.returns)),
        "episodes": len(batch),
        "errors": error_mix(batch),
    }, batch


def error_mix(batch: Trajectories) -> dict[str, float]:
    """The share of each ``info["outcome"]`` on the episodes' last steps, for envs that report
    one (Calculator-v0 does: correct, no tool, operand copy, result copy, malformed)."""
    kinds = [e.infos[-1]["outcome"] for e in batch if e.infos and "outcome" in e.infos[-1]]
    return {kind: kinds.count(kind) / len(kinds) for kind in sorted(set(kinds))}


def transcript(agent: PPOAgent, episode: Any) -> str:
    """An episode as text: the model's turns in ``[[...]]``, the env's text as is."""
    tok = agent.tokenizer
    pieces, start = [], 0
    mask = episode.action_mask.tolist()
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[start]:
            text = tok.decode(episode.tokens[start:t].tolist())
            pieces.append(f"[[{text}]]" if mask[start] else text)
            start = t
    return "".join(pieces)
