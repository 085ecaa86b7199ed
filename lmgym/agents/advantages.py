"""Advantage estimators: token-level GAE, and critic-free RLOO and GRPO over episode groups.

Pure functions on tensors; ``PPOAgent.compute_advantages`` lays episodes out for them. Also the
update's per-episode helpers: the critic's explained variance, and truncated importance weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from lmgym.agents.loss import LossInputs
from lmgym.agents.trajectories import Episode, Trajectories, pad_batch


class Targets(NamedTuple):
    """What ``PPOAgent.compute_advantages`` gives ``update``: per episode, advantages and returns
    (T,) (0 off actions), the batch's KL per episode (N,), and the advantages' spread before
    whitening (the signal's scale, logged as ``advantages/raw_std``)."""

    advantages: list[torch.Tensor]
    returns: list[torch.Tensor]
    kl: torch.Tensor
    raw_std: float


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
    episodes: Sequence[Episode],
    estimator: str,
    gamma: float = 1.0,
    gae_lambda: float = 0.95,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns (T,) per episode (0 off its action tokens) from per-token
    ``rewards`` (T,): token-level ``gae`` over each episode's action tokens with its values (the
    bootstrap value when it was truncated), or a group baseline (``rloo``, ``grpo``) of the
    episodes' total rewards, the same for every action token of an episode."""
    advantages, returns = [], []
    if estimator == "gae":
        for e, r in zip(episodes, rewards):
            mask = e.action_mask
            assert e.values is not None, "scoring fills the values"
            bootstrap = e.bootstrap_value if e.truncated else 0.0
            adv, ret = gae(r[mask], e.values[mask], bootstrap, gamma, gae_lambda)
            advantages.append(torch.zeros(e.length).masked_scatter(mask, adv))
            returns.append(torch.zeros(e.length).masked_scatter(mask, ret))
        return advantages, returns
    totals = torch.stack([r.sum() for r in rewards])  # (N,) episode returns, KL included
    estimate = rloo_advantages if estimator == "rloo" else grpo_advantages
    for e, a in zip(episodes, estimate(totals, [e.group for e in episodes])):
        advantages.append(torch.where(e.action_mask, a, 0.0))
        returns.append(torch.where(e.action_mask, totals.new_tensor(float(a)), 0.0))
    return advantages, returns


def mark_stale(episodes: Sequence[Episode], version: int, max_staleness: int) -> None:
    """Episodes sampled by an older policy than ``version`` (the overlapped update's): their
    log-probs become the sampler's, for the importance weights, and are scored again under the
    current policy. An episode more than ``max_staleness`` versions old is refused."""
    for e in episodes:
        if e.versions is None or not e.action_mask.any():
            continue
        age = version - int(e.versions[e.action_mask].min())
        if age > max_staleness:
            raise ValueError(f"an episode sampled {age} updates ago, more than max_staleness={max_staleness}")
        if age > 0 and e.logprobs is not None:
            e.sampler_logprobs = e.sampler_logprobs if e.sampler_logprobs is not None else e.logprobs
            e.logprobs = e.values = None


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


def loss_inputs(batch: Trajectories, targets: Targets, tis_cap: float, device: torch.device) -> LossInputs:
    """What the PPO loss reads, per episode, padded to (N, T) on ``device``: tokens and masks, the
    old and reference log-probs, old values, ``targets``' advantages and returns, and the
    truncated importance weights where a sampler's log-probs differ (an inexact or stale one's)."""

    def padded(rows: Sequence[Any]) -> torch.Tensor:  # each filled by scoring
        return pad_batch(list(rows), 0)[0].to(device)

    weighted = any(e.sampler_logprobs is not None for e in batch)
    return LossInputs(
        tokens=padded([e.tokens for e in batch]),
        attention_mask=padded([torch.ones(e.length, dtype=torch.long) for e in batch]),  # 0 where padded
        action_mask=padded([e.action_mask for e in batch]),
        old_logprobs=padded([e.logprobs for e in batch]),
        ref_logprobs=padded([e.ref_logprobs for e in batch]),
        old_values=padded([e.values for e in batch]),
        advantages=padded(targets.advantages),
        returns=padded(targets.returns),
        is_weights=padded([importance_weights(e, tis_cap) for e in batch]) if weighted else None,
    )


def explained_variance(batch: Trajectories, returns: Sequence[torch.Tensor]) -> float:
    """1 - Var(returns - values) / Var(returns) over the batch's action tokens (CleanRL's
    ``explained_variance``): 1 is a perfect critic, 0 no better than a constant, < 0 worse."""
    mask = torch.cat([e.action_mask for e in batch])
    target = torch.cat(list(returns))[mask]
    values = torch.cat([e.values if e.values is not None else torch.zeros(e.length) for e in batch])[mask]
    var = float(target.var(unbiased=False)) if target.numel() else 0.0
    return float("nan") if var == 0 else 1.0 - float((target - values).var(unbiased=False)) / var


def importance_weights(episode: Episode, cap: float) -> torch.Tensor:
    """Truncated importance weights (T,): min(p_trainer / p_engine, cap) on action tokens, 1
    elsewhere, for episodes an inexact engine sampled (1 everywhere for the others)."""
    if episode.sampler_logprobs is None or episode.logprobs is None:
        return torch.ones(episode.length)
    ratio = (episode.logprobs - episode.sampler_logprobs).exp().clamp(max=cap)
    return torch.where(episode.action_mask, ratio, 1.0)
