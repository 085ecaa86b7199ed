"""Evaluation on held-out seeds: success rate with its 95% Wilson interval, tool-call rate, mean
return; with ``samples=k``, pass@k and the success rate at the sampling temperature too."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from lmgym.agents.engines.sampling import stream_key
from lmgym.agents.intervals import mean_interval, mean_pass_at_k, wilson
from lmgym.agents.rollout import EVAL_SEED_OFFSET
from lmgym.agents.trajectories import Trajectories

if TYPE_CHECKING:
    from lmgym.agents.learner import Learner


SEED_KEY_BASE = 0x5EED << 40


def held_out_seeds(n: int) -> list[int]:
    """Evaluation seeds: ``EVAL_SEED_OFFSET + i``, disjoint from every training seed."""
    return [EVAL_SEED_OFFSET + i for i in range(n)]


def seed_keys(seeds: list[int], repeats: int) -> list[int]:
    """The sampling stream of each of ``repeats`` plays of each seed: a function of the seed and
    the play's place only, so that an episode samples the same whatever batch it is played in,
    and evaluating leaves the training's RNG as it was."""
    return [stream_key(SEED_KEY_BASE + s * repeats, j) for s in seeds for j in range(repeats)]


def evaluate(
    agent: Learner,
    envs: gym.Env | gym.vector.VectorEnv,
    episodes: int = 200,
    greedy: bool = True,
    progress: bool = False,
    samples: int = 0,
) -> tuple[dict[str, Any], Trajectories]:
    """Plays ``episodes`` held-out episodes (greedy, or sampled); returns ``{"success",
    "success_ci", "tool_rate", "mean_return", "episodes", "errors"}`` (``success_ci``: the 95%
    Wilson interval) and the episodes themselves. With ``samples=k``, each held-out task is also
    played k times sampled (at the configured temperature): ``sampled`` holds ``success`` (and its
    interval) over those and ``pass@k`` (``lmgym.agents.intervals.pass_at_k``). With ``progress``,
    a bar shows the episodes done and the generated tokens per second."""
    batch = play(agent, envs, held_out_seeds(episodes), 1, {"do_sample": False} if greedy else {}, progress)
    stats = summary(batch)
    if samples:
        sampled = play(agent, envs, held_out_seeds(episodes), samples, {}, progress)
        counts = [
            (samples, sum(e.success for e in sampled.episodes[i : i + samples]))
            for i in range(0, len(sampled), samples)
        ]
        stats["sampled"] = {**summary(sampled), "k": samples, f"pass@{samples}": mean_pass_at_k(counts, samples)}
    return stats, batch


def summary(batch: Trajectories) -> dict[str, Any]:
    stats = batch.stats()
    wins = sum(e.success for e in batch.episodes)
    return {
        "success": stats["env/success"],
        "success_ci": list(wilson(wins, len(batch))),
        "tool_rate": stats["env/tool_rate"],
        "mean_return": float(np.mean(batch.returns)),
        "return_ci": list(mean_interval(batch.returns)),
        "episodes": len(batch),
        "errors": error_mix(batch),
    }


def play(
    agent: Learner, envs: Any, seeds: list[int], repeats: int, kwargs: dict[str, Any], progress: bool
) -> Trajectories:
    """Each of ``seeds`` played ``repeats`` times (a group of them), a wave of the vector env at a time."""
    from tqdm.auto import tqdm

    wave = max(1, (envs.num_envs if isinstance(envs, gym.vector.VectorEnv) else 1) // repeats) * repeats
    per_wave = wave // repeats
    played: list[Any] = []
    generated, started = 0, time.perf_counter()
    desc = "evaluating (greedy)" if kwargs.get("do_sample") is False else f"evaluating (sampled x{repeats})"
    total = len(seeds) * repeats
    with tqdm(total=total, unit="ep", desc=desc, disable=not progress, leave=False) as bar:
        for first in range(0, len(seeds), per_wave):
            part_seeds = seeds[first : first + per_wave]
            part = agent.collect(
                envs,
                len(part_seeds) * repeats,
                group_size=repeats,
                seeds=part_seeds,
                generation_kwargs=kwargs,
                keys=seed_keys(part_seeds, repeats),
            )
            played += part.episodes
            generated += sum(int(e.action_mask.sum()) for e in part.episodes)
            bar.update(len(part))
            bar.set_postfix(tokens_per_s=f"{generated / max(time.perf_counter() - started, 1e-9):.0f}")
    return Trajectories(played, agent.tokenizer)


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
