"""What one update derives from its episodes, in tensors of its own (SB3's ``RolloutBuffer``,
filled once): the episodes stay as the collector and the scorer wrote them. Also the update's
per-episode helpers: the padded loss inputs, truncated importance weights, the loss mask, the
critic's explained variance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lmgym.agents.loss import LossInputs
from lmgym.agents.trajectories import Episode, pad_batch


@dataclass
class UpdateBatch:
    """An update's episodes and what it trains them with, per episode (T,) unless said.

    Attributes:
        episodes: the batch, as collected and scored.
        values: the old values (shifted to the mean return when the value head starts at this update).
        bootstraps: V after each episode's last token (used when it was truncated).
        turn_rewards: each turn's reward as trained on (``PPOConfig.credit``, ``reward_control``).
        rewards: per-token rewards: the turn rewards on their last tokens, minus the k1 KL penalty.
        kl: (N,) each episode's k1 KL to the reference, summed over its action tokens.
        advantages / returns: the estimator's (0 off the actions), whitened when configured.
        raw_std: the advantages' spread before whitening (``advantages/raw_std``).
    """

    episodes: list[Episode]
    values: list[torch.Tensor]
    bootstraps: list[float]
    turn_rewards: list[list[float]]
    rewards: list[torch.Tensor]
    kl: torch.Tensor
    advantages: list[torch.Tensor]
    returns: list[torch.Tensor]
    raw_std: float

    def __len__(self) -> int:
        return len(self.episodes)

    def loss_inputs(self, tis_cap: float, device: torch.device, mask_truncated: bool = False) -> LossInputs:
        """What the PPO loss reads, padded to (N, T) on ``device``: tokens and masks, the old and
        reference log-probs and values, the advantages and returns, the truncated importance
        weights where a sampler's log-probs differ (an inexact or stale one's), and the policy
        loss's mask (``mask_truncated``: without the episodes cut at a budget)."""
        episodes = self.episodes

        def padded(rows: Sequence[Any]) -> torch.Tensor:
            return pad_batch(list(rows), 0)[0].to(device)

        weighted = any(e.sampler_logprobs is not None for e in episodes)
        kept = [e.action_mask & (not cut(e)) for e in episodes] if mask_truncated else []
        return LossInputs(
            tokens=padded([e.tokens for e in episodes]),
            attention_mask=padded([torch.ones(e.length, dtype=torch.long) for e in episodes]),  # 0 where padded
            action_mask=padded([e.action_mask for e in episodes]),
            old_logprobs=padded([e.logprobs for e in episodes]),
            ref_logprobs=padded([e.ref_logprobs for e in episodes]),
            old_values=padded(self.values),
            advantages=padded(self.advantages),
            returns=padded(self.returns),
            is_weights=padded([importance_weights(e, tis_cap) for e in episodes]) if weighted else None,
            policy_mask=padded(kept) if mask_truncated else None,
        )

    def explained_variance(self) -> float:
        """1 - Var(returns - values) / Var(returns) over the action tokens (CleanRL's
        ``explained_variance``): 1 is a perfect critic, 0 no better than a constant, < 0 worse."""
        mask = torch.cat([e.action_mask for e in self.episodes])
        target = torch.cat(self.returns)[mask]
        values = torch.cat(self.values)[mask]
        var = float(target.var(unbiased=False)) if target.numel() else 0.0
        return float("nan") if var == 0 else 1.0 - float((target - values).var(unbiased=False)) / var


def cut(episode: Episode) -> bool:
    """Whether ``episode`` was cut at a budget: truncated (turn limit, context) or a turn that
    used its whole token budget (``Episode.budget_cut``)."""
    return episode.truncated or episode.budget_cut


def importance_weights(episode: Episode, cap: float) -> torch.Tensor:
    """Truncated importance weights (T,): min(p_trainer / p_engine, cap) on action tokens, 1
    elsewhere, for episodes an inexact engine sampled (1 everywhere for the others)."""
    if episode.sampler_logprobs is None or episode.logprobs is None:
        return torch.ones(episode.length)
    ratio = (episode.logprobs - episode.sampler_logprobs).exp().clamp(max=cap)
    return torch.where(episode.action_mask, ratio, 1.0)


__all__ = ["UpdateBatch", "cut", "importance_weights"]
