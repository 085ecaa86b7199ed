"""The PPO loss, as arithmetic on tensors: what ``PPOAgent.loss`` computes once its forward pass
has given the log-probs, values and entropy of a minibatch. Pure functions, no model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch


class LossInputs(NamedTuple):
    """What the PPO loss reads of a minibatch, each (B, T) (``loss_inputs`` pads them once per update)."""

    tokens: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    is_weights: torch.Tensor | None = None
    """Truncated importance weights where a sampler's log-probs differ (an inexact engine's, a
    stale batch's); ``None`` when every token was sampled by the policy being trained."""
    policy_mask: torch.Tensor | None = None
    """The action tokens in the policy loss (``None``: all of them; ``PPOConfig.mask_truncated``
    leaves out the episodes cut at a budget)."""
    normalizer: float | None = None
    """What the token sum of the policy loss is divided by, for the loss types that fix it
    outside the minibatch (``policy_loss``); set per minibatch by ``update``."""

    def rows(self, rows: torch.Tensor, width: int) -> LossInputs:
        """The minibatch of episodes ``rows``, cut to ``width`` positions."""
        cut: list = [v[rows, :width] if isinstance(v, torch.Tensor) else v for v in self]
        return LossInputs(*cut)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the positions ``mask`` selects (token-level: every selected token
    weighs the same, whatever its episode)."""
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1)


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
    weights: torch.Tensor | None = None,
    clip_range_high: float | None = None,
    loss_type: str = "bnpo",
    level: str = "token",
    normalizer: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (Schulman et al. 2017), the ratio clipped to [1 - ``clip_range``,
    1 + ``clip_range_high``], or CISPO's (``loss_type="cispo"``: the weight min(ratio, 1 +
    ``clip_range_high``), gradient stopped, times the log-prob), per token or with one ratio per
    row (``level="sequence"``, GSPO: exp of the mean log-ratio over the row's ``mask``), each
    token's loss weighted by ``weights`` and averaged by ``aggregate``. Returns the loss, the ratio
    (B, T) and the log-ratio (B, T).

    Example:
        >>> lp, old = torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2)
        >>> loss, ratio, _ = clipped_policy_loss(lp, old, torch.ones(1, 2), torch.tensor([[True, True]]), 0.2)
        >>> round(float(loss), 4), [round(r, 4) for r in ratio[0].tolist()]
        (-1.1, [1.0, 2.7183])
    """
    high = clip_range if clip_range_high is None else clip_range_high
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0.0)  # (B, T)
    if level == "sequence":  # GSPO: one ratio per row, the gradient of each token's log-prob through it
        log_ratio = (log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)).expand_as(log_ratio)
        log_ratio = torch.where(mask, log_ratio, 0.0)
    ratio = log_ratio.exp()
    if loss_type == "cispo":
        losses = -ratio.clamp(max=1 + high).detach() * advantages * logprobs
    else:
        losses = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_range, 1 + high))  # (B, T)
    if weights is not None:
        losses = losses * weights
    return aggregate(losses, mask, loss_type, normalizer), ratio, log_ratio


def aggregate(
    losses: torch.Tensor, mask: torch.Tensor, loss_type: str = "bnpo", normalizer: float | None = None
) -> torch.Tensor:
    """The policy loss of a minibatch from its per-token losses (B, T) over ``mask``, by
    ``PPOConfig.loss_type``: ``bnpo``, the mean over the minibatch's tokens; ``grpo``, each row's
    token mean, then the mean over rows; ``dapo``, ``cispo`` and ``dr_grpo``, the token sum over
    ``normalizer`` (the update batch's tokens per optimizer step; rows x the constant length),
    given by ``PPOAgent.minibatches``.

    Example:
        >>> losses, mask = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]]), torch.tensor([[1, 1, 1], [1, 0, 0]]).bool()
        >>> [float(aggregate(losses, mask, t, 8.0)) for t in ("bnpo", "grpo", "dapo")]
        [1.75, 2.5, 0.875]
    """
    if loss_type == "bnpo" or (normalizer is None and loss_type != "grpo"):
        return masked_mean(losses, mask)
    if loss_type == "grpo":
        per_row = torch.where(mask, losses, 0.0).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
        return per_row[mask.any(-1)].mean() if mask.any() else per_row.sum() * 0
    return torch.where(mask, losses, 0.0).sum() / max(float(normalizer or 1.0), 1.0)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """Half the squared error of the values against the returns, the larger of the clipped and
    unclipped one when ``clip`` is set (PPO's value clipping, as in CleanRL and TRL).

    Example:
        >>> v, old, ret, mask = torch.tensor([[2.0]]), torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([[True]])
        >>> float(value_loss(v, old, ret, mask, None)), float(value_loss(v, old, ret, mask, 0.5))
        (2.0, 2.0)
    """
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * masked_mean(unclipped, mask)
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * masked_mean(torch.max(unclipped, (clipped - returns) ** 2), mask)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(policy || reference) (Schulman 2020), a token-level mean, as GRPO
    adds it to the loss: exp(r) - r - 1 with r = log p_ref - log p.

    Example:
        >>> float(k3_kl(torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.tensor([[True]])))
        0.0
    """
    log_ratio = torch.where(mask, ref_logprobs - logprobs, 0.0)
    return masked_mean(log_ratio.exp() - log_ratio - 1, mask)


def approx_kl(ratio: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(old || new) estimated as (r - 1) - log r (Schulman 2020; CleanRL's ``approx_kl``)."""
    return masked_mean((ratio - 1) - log_ratio, mask)


def minibatch_rows(n: int, size: int, epochs: int) -> Iterator[torch.Tensor]:
    """The rows of each mini-batch of an update: ``epochs`` shuffles of ``n`` rows, ``size`` at a time."""
    for _ in range(epochs):
        order = torch.randperm(n)
        yield from (order[lo : lo + size] for lo in range(0, n, size))


__all__ = [
    "LossInputs",
    "aggregate",
    "approx_kl",
    "minibatch_rows",
    "clipped_policy_loss",
    "k3_kl",
    "masked_mean",
    "value_loss",
]
