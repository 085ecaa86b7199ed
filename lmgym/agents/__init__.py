"""The token-level PPO agent for Hugging Face causal LMs.

Imports torch, transformers and accelerate; ``import lmgym`` alone does not.
"""

from lmgym.agents.advantages import gae, grpo_advantages, rloo_advantages, whiten
from lmgym.agents.config import PPOConfig
from lmgym.agents.kl import KLController
from lmgym.agents.ppo import EVAL_SEED_OFFSET, PPOAgent
from lmgym.agents.trajectories import Episode, Trajectories

__all__ = [
    "EVAL_SEED_OFFSET",
    "Episode",
    "KLController",
    "PPOAgent",
    "PPOConfig",
    "Trajectories",
    "gae",
    "grpo_advantages",
    "rloo_advantages",
    "whiten",
]
