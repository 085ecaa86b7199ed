"""The rewards an update trains on: each episode's turn rewards after ``PPOConfig.credit`` and
``PPOConfig.reward_control``, then laid on its tokens with the KL penalty. Pure functions; the
episodes keep the rewards the env gave (metrics and evaluations read those)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lmgym.agents.trajectories import Episode


def trained_rewards(
    episodes: Sequence[Episode], credit: str = "turn", control: str | None = None, seed: int | Sequence[int] = 0
) -> list[list[float]]:
    """Each episode's turn rewards as the update trains on them.

    ``credit="episode"`` puts each episode's total on its last turn (0 on the others);
    ``control="shuffle"`` permutes the episodes' totals across the batch (``seed`` picks the
    permutation), each on its episode's last turn: the control run of a learning claim.

    Example:
        >>> from lmgym.agents.trajectories import Episode
        >>> e = Episode([0, 1, 2], [False, True, True], [1, 2], [0.5, 1.0])
        >>> trained_rewards([e]), trained_rewards([e], credit="episode")
        ([[0.5, 1.0]], [[0.0, 1.5]])
    """
    totals = [e.return_ for e in episodes]
    if control == "shuffle":
        totals = [float(r) for r in np.random.default_rng(seed).permutation(totals)]
    elif credit == "turn":
        return [list(e.rewards) for e in episodes]
    return [[0.0] * (len(e.rewards) - 1) + [total] for e, total in zip(episodes, totals)]


def token_rewards(episode: Episode, turn_rewards: Sequence[float], kl: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards (T,): each turn's reward on its last action token, minus ``kl_coef`` x
    the per-token ``kl`` (T,) (0 off the actions).

    Example:
        >>> from lmgym.agents.trajectories import Episode
        >>> e = Episode([0, 1, 2], [False, True, True], [2], [1.0])
        >>> token_rewards(e, [1.0], torch.tensor([0.0, 0.5, 1.0]), 0.5).tolist()
        [0.0, -0.25, 0.5]
    """
    rewards = torch.zeros(episode.length)
    rewards[episode.turn_ends] += torch.tensor(list(turn_rewards), dtype=torch.float32)
    return rewards - kl_coef * kl


__all__ = ["token_rewards", "trained_rewards"]
