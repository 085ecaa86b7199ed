"""Evaluation on held-out seeds: success rate, tool-call rate and mean return."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from lmgym.agents.rollout import EVAL_SEED_OFFSET
from lmgym.agents.trajectories import Trajectories

if TYPE_CHECKING:
    from lmgym.agents.learner import Learner


def held_out_seeds(n: int) -> list[int]:
    """Evaluation seeds: ``EVAL_SEED_OFFSET + i``, disjoint from every training seed."""
    return [EVAL_SEED_OFFSET + i for i in range(n)]


def evaluate(
    agent: Learner,
    envs: gym.Env | gym.vector.VectorEnv,
    episodes: int = 200,
    greedy: bool = True,
    progress: bool = False,
) -> tuple[dict[str, Any], Trajectories]:
    """Plays ``episodes`` held-out episodes; returns ``{"success", "tool_rate", "mean_return",
    "episodes"}`` and the episodes themselves. With ``progress``, a bar shows the episodes done
    and the generated tokens per second (one wave of the vector env at a time)."""
    from tqdm.auto import tqdm

    kwargs = {"do_sample": False} if greedy else {}
    seeds = held_out_seeds(episodes)
    wave = envs.num_envs if isinstance(envs, gym.vector.VectorEnv) else 1
    played: list[Any] = []
    generated, started = 0, time.perf_counter()
    desc = "evaluating (greedy)" if greedy else "evaluating (sampled)"
    with tqdm(total=episodes, unit="ep", desc=desc, disable=not progress, leave=False) as bar:
        for first in range(0, episodes, wave):
            part = agent.collect(
                envs,
                len(seeds[first : first + wave]),
                group_size=1,
                seeds=seeds[first : first + wave],
                generation_kwargs=kwargs,
                score=False,
            )
            played += part.episodes
            generated += sum(int(e.action_mask.sum()) for e in part.episodes)
            bar.update(len(part))
            bar.set_postfix(tokens_per_s=f"{generated / max(time.perf_counter() - started, 1e-9):.0f}")
    batch = Trajectories(played, agent.tokenizer)
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


def transcript(agent: Learner, episode: Any) -> str:
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
