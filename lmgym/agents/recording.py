"""Episodes kept for ``lmgym view``: per-token log-probs, values, advantages, KL and ratios.

``learn`` keeps a bounded number of episodes at several points of training (before the first
update, every ``record_every`` updates, after the last) in ``LOG_DIR/episodes.jsonl``: training
episodes as sampled, with what the update did to them, and greedy episodes on the same held-out
seeds each time, to compare before and after. One compact JSON object per episode
(``episode_record``); ``lmgym.report`` turns the file into an HTML report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lmgym.agents.batch import UpdateBatch
from lmgym.agents.policy import token_logprobs
from lmgym.agents.records import episode_record
from lmgym.agents.trajectories import Episode, pad_batch
from lmgym.storage import writing

if TYPE_CHECKING:
    from lmgym.agents.learner import Learner

EPISODES_FILE = "episodes.jsonl"


def append_records(path: str | os.PathLike, records: Sequence[dict[str, Any]]) -> None:
    """Appends one JSON line per record, all of them or none (a failed write is cut back); a link
    at ``path`` is refused (``OSError``), never followed; a full disk is ``DiskFull``."""
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
    data = memoryview(text.encode("utf-8"))
    with writing(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except BaseException:  # a full disk: no half record is left for the viewer or a resumed run
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)


@torch.no_grad()
def current_logprobs(agent: Learner, episodes: Sequence[Episode]) -> list[torch.Tensor]:
    """Log-probs (T,) of each episode's tokens under the agent's policy as it is now."""

    tokens, attention = pad_batch([e.tokens for e in episodes], agent.tokenizer.pad_token_id)
    device = agent.accelerator.device
    logits, _ = agent.policy(tokens.to(device), attention.to(device))
    logprobs = token_logprobs(logits, tokens.to(device), agent.config.rollout.temperature).cpu()  # (B, T)
    return [logprobs[i, : e.length] for i, e in enumerate(episodes)]


class EpisodeRecorder:
    """What ``learn`` keeps for the viewer: at each recorded update, ``n`` training episodes of
    that update and ``n`` greedy episodes on fixed held-out seeds.

    Args:
        log_dir: where ``episodes.jsonl`` goes.
        n: episodes of each kind per recorded update (``PPOConfig.record_episodes``).
        every: record every this many updates, besides before the first and after the last.
        env_id: the env's registered id, shown in the report.
        write: whether this process writes the file (every process plays the episodes, so that
            the forward passes of a distributed policy stay in step; the main process writes).
    """

    def __init__(self, log_dir: str | os.PathLike, n: int, every: int, env_id: str | None = None, write: bool = True):
        self.path = Path(log_dir) / EPISODES_FILE
        self.n, self.every, self.env_id, self.write = n, max(1, every), env_id, write

    def due(self, update: int, last: bool) -> bool:
        return last or update <= 1 or update % self.every == 0

    def record(self, agent: Learner, envs: Any, batch: UpdateBatch | None, update: int) -> None:
        """Appends this update's episodes (``agent``: a ``PPOAgent``): ``batch`` (just trained
        on, with its advantages) and the held-out ones."""
        from lmgym.agents.evaluation import held_out_seeds, seed_keys

        records = []
        kept = list(zip(batch.episodes, batch.advantages))[: self.n] if batch is not None else []
        if kept:
            new = current_logprobs(agent, [e for e, _ in kept])
            records += [
                episode_record(e, agent.tokenizer, update, "train", self.env_id, n, adv)
                for (e, adv), n in zip(kept, new)
            ]
        seeds = held_out_seeds(self.n)
        probe = agent.collect(
            envs, self.n, group_size=1, seeds=seeds, generation_kwargs={"do_sample": False}, keys=seed_keys(seeds, 1)
        )
        advantages: list[Any] = [None] * len(probe)
        agent.score(probe)
        if agent.config.estimator == "gae":  # group estimators need groups; greedy episodes have none
            advantages = agent.derive(probe).advantages
        records += [
            episode_record(e, agent.tokenizer, update, "held-out", self.env_id, advantages=adv)
            for e, adv in zip(probe, advantages)
        ]
        if self.write:
            append_records(self.path, records)
