"""Callbacks: what ``learn`` calls around each update, the user's and its own.

A user's callback is a plain callable ``cb(agent, metrics)`` called after every update, or an
object with any of ``on_collect(agent, batch)``, ``on_update(agent, metrics)`` and
``on_checkpoint(agent, path)``; returning ``False`` stops training. Entries an ``on_update``
adds to ``metrics`` (an evaluation, say) are logged too.

``learn``'s own work after an update is callbacks of the same kind, run after the user's with
``after_update(agent, batch, metrics, last)``: ``MetricsCallback`` (``metrics.csv`` and
TensorBoard), ``RecordCallback`` (episodes for ``lmgym view``), ``ProgressCallback`` (the bar)
and ``CheckpointCallback``. ``Evaluator`` is the greedy held-out evaluation ``lmgym train`` runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmgym.agents.metrics import MetricsLogger
from lmgym.agents.recording import EpisodeRecorder

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent
    from lmgym.agents.trajectories import Trajectories

Callback = Callable[..., Any]


def fire(callbacks: Iterable[Callback], event: str, *args: Any) -> bool | None:
    """Calls each callback for ``event``; ``False`` if any of them asks to stop."""
    stop = False
    for cb in callbacks:
        method = getattr(cb, event, None)
        if method is None and event == "on_update" and callable(cb) and not hasattr(cb, "on_collect"):
            method = cb
        if method is not None and method(*args) is False:
            stop = True
    return False if stop else None


class RunCallback:
    """One of ``learn``'s own callbacks: ``after_update`` after the user's, ``close`` at the end."""

    def after_update(self, agent: PPOAgent, batch: Trajectories, metrics: dict[str, float], last: bool) -> None:
        """After each update (``last``: the run ends after this one)."""

    def close(self) -> None:
        """When ``learn`` returns."""


class MetricsCallback(RunCallback):
    """Logs each update's metrics to ``log_dir`` (``metrics.csv``, TensorBoard when installed)."""

    def __init__(self, log_dir: str | os.PathLike, config: dict[str, Any]):
        self.logger = MetricsLogger(log_dir, config)

    def after_update(self, agent: PPOAgent, batch: Trajectories, metrics: dict[str, float], last: bool) -> None:
        self.logger.log(metrics, agent.num_updates)

    def close(self) -> None:
        self.logger.close()


class RecordCallback(RunCallback):
    """Keeps episodes for ``lmgym view`` in ``log_dir``: before the first update and at about
    ten points of the run (``PPOConfig.run.record_episodes``, ``record_every``)."""

    def __init__(self, agent: PPOAgent, envs: Any, log_dir: str | os.PathLike, total_episodes: int):
        from lmgym.agents.rollout import env_id_of

        run = agent.config.run
        updates = -(-total_episodes // agent.config.episodes_per_update)
        every = run.record_every or max(1, updates // 10)
        main = agent.accelerator.is_main_process
        self.recorder = EpisodeRecorder(log_dir, run.record_episodes, every, env_id_of(envs), main)
        self.envs = envs
        if agent.num_updates == 0:
            self.recorder.record(agent, envs, None, 0)  # before training: the held-out episodes

    def after_update(self, agent: PPOAgent, batch: Trajectories, metrics: dict[str, float], last: bool) -> None:
        if self.recorder.due(agent.num_updates, last):
            self.recorder.record(agent, self.envs, batch, agent.num_updates)


class ProgressCallback(RunCallback):
    """A progress bar over the episodes, with the last update's return, success and KL."""

    def __init__(self, agent: PPOAgent, total_episodes: int, enabled: bool = True):
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=total_episodes,
            initial=min(agent.num_episodes, total_episodes),
            unit="ep",
            disable=not (enabled and agent.accelerator.is_main_process),
        )

    def after_update(self, agent: PPOAgent, batch: Trajectories, metrics: dict[str, float], last: bool) -> None:
        self.bar.update(len(batch))
        self.bar.set_postfix(
            reward=f"{metrics['env/return']:.3f}",
            success=f"{metrics['env/success']:.2f}",
            kl=f"{metrics['objective/kl']:.3f}",
        )

    def close(self) -> None:
        self.bar.close()


class CheckpointCallback(RunCallback):
    """Saves a checkpoint every ``PPOConfig.run.checkpoint_every`` updates and after the last,
    then tells the user's callbacks (``on_checkpoint(agent, path)``)."""

    def __init__(self, checkpoint_dir: str | os.PathLike, envs: Any, callbacks: Iterable[Callback]):
        self.dir, self.envs, self.callbacks = Path(checkpoint_dir), envs, list(callbacks)

    def after_update(self, agent: PPOAgent, batch: Trajectories, metrics: dict[str, float], last: bool) -> None:
        every = agent.config.run.checkpoint_every
        if last or (every and agent.num_updates % every == 0):
            path = agent.save_checkpoint(self.dir, self.envs)
            fire(self.callbacks, "on_checkpoint", agent, path)


def run_callbacks(
    agent: PPOAgent,
    envs: Any,
    total_episodes: int,
    callbacks: Iterable[Callback],
    log_dir: str | os.PathLike | None,
    checkpoint_dir: str | os.PathLike | None,
    progress_bar: bool,
) -> list[RunCallback]:
    """``learn``'s own callbacks for these arguments, in the order they run."""
    out: list[RunCallback] = []
    if log_dir and agent.accelerator.is_main_process:
        out.append(MetricsCallback(log_dir, agent.config.flat()))
    if log_dir and agent.config.run.record_episodes:
        out.append(RecordCallback(agent, envs, log_dir, total_episodes))
    out.append(ProgressCallback(agent, total_episodes, progress_bar))
    if checkpoint_dir:
        out.append(CheckpointCallback(checkpoint_dir, envs, callbacks))
    return out


class Evaluator:
    """``on_update`` callback: a greedy evaluation on held-out seeds every ``every`` updates, and
    a full one (``final_episodes``) after the last update, kept in ``final``."""

    def __init__(self, envs: Any, episodes: int, every: int, final_episodes: int, total_episodes: int):
        self.envs, self.episodes, self.every = envs, episodes, every
        self.final_episodes, self.total_episodes = final_episodes, total_episodes
        self.final: tuple[dict[str, Any], Any] | None = None

    def on_update(self, agent: PPOAgent, metrics: dict[str, float]) -> None:
        from lmgym.agents.evaluation import evaluate

        if agent.num_episodes >= self.total_episodes:
            self.final = evaluate(agent, self.envs, self.final_episodes)
            stats = self.final[0]
        elif self.every and agent.num_updates % self.every == 0:
            stats, _ = evaluate(agent, self.envs, self.episodes)
        else:
            return
        metrics.update(eval_metrics(stats))


def eval_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """An evaluation as ``eval/`` metrics: success, tool-call rate and the error mix."""
    return {
        "eval/success": stats["success"],
        "eval/tool_rate": stats["tool_rate"],
        **{f"eval/error/{kind}": share for kind, share in stats.get("errors", {}).items() if kind != "correct"},
    }


__all__ = [
    "CheckpointCallback",
    "Evaluator",
    "MetricsCallback",
    "ProgressCallback",
    "RecordCallback",
    "RunCallback",
    "eval_metrics",
    "fire",
    "run_callbacks",
]
