"""The token-level PPO agent for Hugging Face causal LMs.

Names load on first use, so ``lmgym.agents.config`` (and the ``lmgym`` command's option
parsing) does not import torch, transformers or accelerate.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PPOAgent": "lmgym.agents.ppo",
    "EVAL_SEED_OFFSET": "lmgym.agents.ppo",
    "PPOConfig": "lmgym.agents.config",
    "Episode": "lmgym.agents.trajectories",
    "Trajectories": "lmgym.agents.trajectories",
    "KLController": "lmgym.agents.kl",
    "gae": "lmgym.agents.advantages",
    "grpo_advantages": "lmgym.agents.advantages",
    "rloo_advantages": "lmgym.agents.advantages",
    "whiten": "lmgym.agents.advantages",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lmgym.agents' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
