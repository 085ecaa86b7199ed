"""``Learner``: what callbacks, evaluation and recording use of ``PPOAgent`` (they take the agent,
typed by this, never by the class: no import runs back up to ``ppo``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from accelerate import Accelerator

    from lmgym.agents.config import PPOConfig
    from lmgym.agents.trajectories import Trajectories


class Learner(Protocol):
    """What callbacks, evaluation and recording use of ``PPOAgent``."""

    config: PPOConfig
    accelerator: Accelerator
    tokenizer: Any
    policy: Any
    num_updates: int
    num_episodes: int
    last_update: Any

    def collect(
        self,
        envs: Any,
        num_episodes: int,
        group_size: int | None = None,
        seeds: Sequence[int] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        keys: Sequence[int] | None = None,
    ) -> Trajectories: ...

    def score(self, episodes: Any) -> None: ...

    def derive(self, batch: Trajectories) -> Any: ...

    def save_checkpoint(self, checkpoint_dir: str | os.PathLike, envs: Any = None) -> Path: ...


__all__ = ["Learner"]
