"""KL controllers (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class KLController:
    """A fixed coefficient, or the adaptive one: beta moves to bring the KL toward ``target``.

    Example:
        >>> kl = KLController(0.1, adaptive=True, target=6.0, horizon=100)
        >>> kl.update(12.0, n_episodes=10); round(kl.value, 4)
        0.102
    """

    value: float
    adaptive: bool = False
    target: float = 6.0
    horizon: int = 10_000

    def update(self, current_kl: float, n_episodes: int) -> None:
        if not self.adaptive:
            return
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * n_episodes / self.horizon


def past_target_kl(accelerator: Any, approx_kl: float, target: float | None) -> bool:
    """``PPOConfig.target_kl`` (SB3's rule): whether a mini-batch's approx KL to the sampling
    policy, averaged over processes (so that all stop together), passes 1.5 x ``target``."""
    if target is None:
        return False
    return float(accelerator.gather(torch.tensor([approx_kl], device=accelerator.device)).mean()) > 1.5 * target
