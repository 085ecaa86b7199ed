"""Advantage estimators: token-level GAE, and critic-free RLOO and GRPO over episode groups.

Pure functions on tensors; ``PPOAgent.compute_advantages`` lays the update's per-token rewards
and values out for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmgym.agents.trajectories import Episode


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: float = 0.0,
    gamma: float = 1.0,
    gae_lambda: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over one episode's action tokens.

    The steps are the episode's action tokens in order; the environment's text between turns
    is no step at all (an env gap is zero time steps), so the bootstrap carries across it
    undamped. ``bootstrap_value`` is V of the state after the last token: 0 when the episode
    terminated, the value estimate when it was truncated.

    Args:
        rewards: (N,) reward of each action token.
        values: (N,) value of the state before each action token.

    Returns:
        advantages (N,) and returns (N,) = advantages + values.

    Example:
        >>> adv, ret = gae(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5]), gamma=1.0, gae_lambda=1.0)
        >>> adv.tolist(), ret.tolist()
        ([0.5, 0.5], [1.0, 1.0])
    """
    next_values = torch.cat([values[1:], values.new_tensor([bootstrap_value])])
    deltas = (rewards + gamma * next_values - values).tolist()  # (N,): a Python loop over floats is fast
    advantages, running = [0.0] * len(deltas), 0.0
    for t in reversed(range(len(deltas))):
        running = deltas[t] + gamma * gae_lambda * running
        advantages[t] = running
    adv = torch.tensor(advantages, dtype=values.dtype)
    return adv, adv + values


def episode_advantages(
    rewards: Sequence[torch.Tensor],
    values: Sequence[torch.Tensor],
    bootstraps: Sequence[float],
    episodes: Sequence[Episode],
    estimator: str,
    gamma: float = 1.0,
    gae_lambda: float = 0.95,
    scale_rewards: str | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns (T,) per episode (0 off its action tokens) from per-token
    ``rewards`` (T,): token-level ``gae`` over each episode's action tokens with its ``values``
    (T,) (and its bootstrap value when it was truncated), or a group baseline (``rloo``, ``grpo``)
    of the episodes' total rewards, the same for every action token of an episode, scaled by
    ``scale_rewards`` (``group_advantages``)."""
    advantages, returns = [], []
    if estimator == "gae":
        for e, r, v, bootstrap in zip(episodes, rewards, values, bootstraps):
            mask = e.action_mask
            adv, ret = gae(r[mask], v[mask], bootstrap if e.truncated else 0.0, gamma, gae_lambda)
            advantages.append(torch.zeros(e.length).masked_scatter(mask, adv))
            returns.append(torch.zeros(e.length).masked_scatter(mask, ret))
        return advantages, returns
    totals = torch.stack([r.sum() for r in rewards])  # (N,) episode returns, KL included
    per_episode = group_advantages(totals, [e.group for e in episodes], estimator, scale_rewards)
    for e, a in zip(episodes, per_episode):
        advantages.append(torch.where(e.action_mask, a, 0.0))
        returns.append(torch.where(e.action_mask, totals.new_tensor(float(a)), 0.0))
    return advantages, returns


def group_advantages(
    returns: torch.Tensor, group_ids: Sequence[int], estimator: str, scale_rewards: str | None = None, eps: float = 1e-4
) -> torch.Tensor:
    """A group estimator's advantage (N,) per episode: ``rloo_advantages``, or the return minus
    its group's mean (``grpo``), divided by the group's return spread (``"group"``, GRPO's
    default), the batch's (``"batch"``) or nothing (``"none"``: RLOO's own, and Dr. GRPO's);
    ``None``: the estimator's own. A spread of 0 divides nothing.

    Example:
        >>> r, g = torch.tensor([1.0, 0.0, 3.0, 1.0]), [0, 0, 1, 1]
        >>> group_advantages(r, g, "grpo", "none").tolist(), group_advantages(r, g, "rloo", "group", eps=0).tolist()
        ([0.5, -0.5, 1.0, -1.0], [2.0, -2.0, 2.0, -2.0])
    """
    scale = scale_rewards or ("group" if estimator == "grpo" else "none")
    if estimator == "rloo":
        advantages = rloo_advantages(returns, group_ids)
    else:
        advantages = torch.zeros_like(returns)
    for members in _groups(group_ids).values():
        r = returns[members]
        if estimator == "grpo":
            advantages[members] = r - r.mean()
        std = r.std(unbiased=False)
        if scale == "group" and std > 0:
            advantages[members] = advantages[members] / (std + eps)
    std = returns.std(unbiased=False)
    if scale == "batch" and std > 0:
        advantages = advantages / (std + eps)
    return advantages


def _groups(group_ids: Sequence[int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(int(g), []).append(i)
    for g, members in groups.items():
        if len(members) < 2:
            raise ValueError(
                f"group {g} has {len(members)} episode; group estimators need >= 2 "
                "episodes per task: collect(..., group_size=k) with k >= 2"
            )
    return groups


def rloo_advantages(returns: torch.Tensor, group_ids: Sequence[int]) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): R_i minus the mean of the others in its group.

    Example:
        >>> rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 2.0]), [0, 0, 1, 1]).tolist()
        [1.0, -1.0, -2.0, 2.0]
    """
    advantages = torch.zeros_like(returns)
    for members in _groups(group_ids).values():
        r = returns[members]
        advantages[members] = r - (r.sum() - r) / (len(members) - 1)
    return advantages


def grpo_advantages(returns: torch.Tensor, group_ids: Sequence[int], eps: float = 1e-4) -> torch.Tensor:
    """GRPO (Shao et al. 2024): (R_i - group mean) / (group std + eps), population std.

    A group whose returns are all equal gets zero advantages.

    Example:
        >>> grpo_advantages(torch.tensor([1.0, 0.0, 3.0, 3.0]), [0, 0, 1, 1], eps=0.0).tolist()
        [1.0, -1.0, 0.0, 0.0]
    """
    advantages = torch.zeros_like(returns)
    for members in _groups(group_ids).values():
        r = returns[members]
        std = r.std(unbiased=False)
        advantages[members] = 0.0 if std == 0 else (r - r.mean()) / (std + eps)
    return advantages


def whiten(x: torch.Tensor, mask: torch.Tensor, min_std: float = 0.1) -> torch.Tensor:
    """Normalizes ``x`` over the positions ``mask`` selects; zero elsewhere.

    Guards a near-zero spread: below ``min_std`` the values are only centred, not scaled,
    since dividing by it would turn noise into large updates.

    Example:
        >>> whiten(torch.tensor([1.0, 3.0, 9.0]), torch.tensor([True, True, False])).tolist()
        [-1.0, 1.0, 0.0]
    """
    selected = x[mask]
    centred = x - selected.mean()
    std = selected.std(unbiased=False)
    out = centred / std if std > min_std else centred
    return torch.where(mask, out, torch.zeros_like(x))


__all__ = ["episode_advantages", "gae", "group_advantages", "grpo_advantages", "rloo_advantages", "whiten"]
