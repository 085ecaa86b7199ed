"""Callbacks: what ``learn`` calls around each update, the user's and its own, all of one kind.

A callback is a plain callable ``cb(agent, metrics)`` called after every update, or an object
with any of ``on_collect(agent, batch)``, ``on_update(agent, metrics)``,
``on_checkpoint(agent, path)`` and ``on_learn_end(agent, error)`` (``Callback`` has them all,
doing nothing); returning ``False`` from ``on_collect`` or ``on_update`` stops training. Entries
an ``on_update`` adds to ``metrics`` (an evaluation, say) are logged too: ``learn`` runs the
user's callbacks first, then its own (``run_callbacks``): ``MetricsCallback`` (``metrics.csv``
and TensorBoard), ``RecordCallback`` (episodes for ``lmgym view``), ``ProgressCallback`` (the
bar) and ``CheckpointCallback``. ``Evaluator`` is the greedy held-out evaluation ``lmgym train``
runs; ``StopAtSuccess`` stops a run whose evaluation reached a success rate.

Callbacks see the agent through ``Learner``, the few things of it they use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmgym.agents.learner import Learner
from lmgym.agents.metrics import MetricsLogger
from lmgym.agents.recording import EpisodeRecorder

if TYPE_CHECKING:
    from lmgym.agents.trajectories import Trajectories


class Callback:
    """A ``learn`` callback that does nothing: subclass it and override what you need."""

    def on_collect(self, agent: Learner, batch: Trajectories) -> bool | None:
        """After a batch is collected, before its update; ``False`` stops training."""
        return None

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> bool | None:
        """After each update, with its metrics (entries added here are logged); ``False`` stops training."""
        return None

    def on_checkpoint(self, agent: Learner, path: Path) -> None:
        """After ``learn`` wrote a checkpoint to ``path``."""

    def on_learn_end(self, agent: Learner, error: BaseException | None) -> None:
        """When ``learn`` returns (``error``: what it raised, if it did)."""


CallbackLike = Callback | Callable[..., Any]


def fire(callbacks: Iterable[Any], event: str, *args: Any) -> bool | None:
    """Calls each callback for ``event`` (a plain callable is an ``on_update``); ``False`` if any
    of them asks to stop."""
    stop = False
    for cb in callbacks:
        method = getattr(cb, event, None)
        if method is None and event == "on_update" and callable(cb) and not hasattr(cb, "on_collect"):
            method = cb
        if method is not None and method(*args) is False:
            stop = True
    return False if stop else None


class MetricsCallback(Callback):
    """Logs each update's metrics to ``log_dir`` (``metrics.csv``, TensorBoard when installed)."""

    def __init__(self, log_dir: str | os.PathLike, config: dict[str, Any]):
        self.logger = MetricsLogger(log_dir, config)

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> None:
        self.logger.log(metrics, agent.num_updates)

    def on_learn_end(self, agent: Learner, error: BaseException | None) -> None:
        self.logger.close()


class RecordCallback(Callback):
    """Keeps episodes for ``lmgym view`` in ``log_dir``: before the first update, at about ten
    points of the run (``PPOConfig.run.record_episodes``, ``record_every``) and after the last."""

    def __init__(self, agent: Learner, envs: Any, log_dir: str | os.PathLike, total_episodes: int):
        from lmgym.agents.rollout import env_id_of

        run = agent.config.run
        updates = -(-total_episodes // agent.config.episodes_per_update)
        every = run.record_every or max(1, updates // 10)
        main = agent.accelerator.is_main_process
        self.recorder = EpisodeRecorder(log_dir, run.record_episodes, every, env_id_of(envs), main)
        self.envs, self.recorded = envs, -1
        if agent.num_updates == 0:
            self.recorder.record(agent, envs, None, 0)  # before training: the held-out episodes
            self.recorded = 0

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> None:
        if self.recorder.due(agent.num_updates, last=False):
            self.record(agent)

    def on_learn_end(self, agent: Learner, error: BaseException | None) -> None:
        if error is None and self.recorded != agent.num_updates:
            self.record(agent)

    def record(self, agent: Learner) -> None:
        self.recorder.record(agent, self.envs, agent.last_update, agent.num_updates)  # with what it trained
        self.recorded = agent.num_updates


class ProgressCallback(Callback):
    """A progress bar over the episodes, with the last update's return, success and KL."""

    def __init__(self, agent: Learner, total_episodes: int, enabled: bool = True):
        from tqdm.auto import tqdm

        self.done = agent.num_episodes
        self.bar = tqdm(
            total=total_episodes,
            initial=min(agent.num_episodes, total_episodes),
            unit="ep",
            disable=not (enabled and agent.accelerator.is_main_process),
        )

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> None:
        self.bar.update(agent.num_episodes - self.done)
        self.done = agent.num_episodes
        self.bar.set_postfix(
            reward=f"{metrics['env/return']:.3f}",
            success=f"{metrics['env/success']:.2f}",
            kl=f"{metrics['objective/kl']:.3f}",
        )

    def on_learn_end(self, agent: Learner, error: BaseException | None) -> None:
        self.bar.close()


class CheckpointCallback(Callback):
    """Saves a checkpoint every ``PPOConfig.run.checkpoint_every`` updates and when ``learn``
    ends, then tells the user's callbacks (``on_checkpoint(agent, path)``)."""

    def __init__(self, checkpoint_dir: str | os.PathLike, envs: Any, callbacks: Iterable[Any]):
        self.dir, self.envs, self.callbacks = Path(checkpoint_dir), envs, list(callbacks)
        self.saved = -1

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> None:
        every = agent.config.run.checkpoint_every
        if every and agent.num_updates % every == 0:
            self.save(agent)

    def on_learn_end(self, agent: Learner, error: BaseException | None) -> None:
        if error is None and agent.num_updates and self.saved != agent.num_updates:
            self.save(agent)

    def save(self, agent: Learner) -> None:
        path = agent.save_checkpoint(self.dir, self.envs)
        self.saved = agent.num_updates
        fire(self.callbacks, "on_checkpoint", agent, path)


def run_callbacks(
    agent: Learner,
    envs: Any,
    total_episodes: int,
    callbacks: Iterable[Any],
    log_dir: str | os.PathLike | None,
    checkpoint_dir: str | os.PathLike | None,
    progress_bar: bool,
) -> list[Callback]:
    """``learn``'s own callbacks for these arguments, in the order they run (after the user's)."""
    out: list[Callback] = []
    if log_dir and agent.accelerator.is_main_process:
        out.append(MetricsCallback(log_dir, agent.config.settings()))
    if log_dir and agent.config.run.record_episodes:
        out.append(RecordCallback(agent, envs, log_dir, total_episodes))
    out.append(ProgressCallback(agent, total_episodes, progress_bar))
    if checkpoint_dir:
        out.append(CheckpointCallback(checkpoint_dir, envs, callbacks))
    return out


class Evaluator(Callback):
    """A greedy evaluation on held-out seeds every ``every`` updates, and a full one
    (``final_episodes``; with ``samples=k``, pass@k too) once ``total_episodes`` are trained on,
    kept in ``final`` (``total_episodes=None``: not yet known, no final one until it is set)."""

    def __init__(
        self, envs: Any, episodes: int, every: int, final_episodes: int, total_episodes: int | None, samples: int = 0
    ):
        self.envs, self.episodes, self.every, self.samples = envs, episodes, every, samples
        self.final_episodes, self.total_episodes = final_episodes, total_episodes
        self.final: tuple[dict[str, Any], Any] | None = None

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> None:
        from lmgym.agents.evaluation import evaluate

        if self.total_episodes is not None and agent.num_episodes >= self.total_episodes:
            self.final = evaluate(agent, self.envs, self.final_episodes, samples=self.samples)
            stats = self.final[0]
        elif self.every and agent.num_updates % self.every == 0:
            stats, _ = evaluate(agent, self.envs, self.episodes)
        else:
            return
        metrics.update(eval_metrics(stats))


class StopAtSuccess(Callback):
    """Stops training once a held-out greedy evaluation (``eval/success``, an ``Evaluator``'s,
    run before this callback) reaches ``threshold``: SB3's ``StopTrainingOnRewardThreshold``, on
    success. ``None``: never."""

    def __init__(self, threshold: float | None):
        self.threshold, self.stopped = threshold, False

    def on_update(self, agent: Learner, metrics: dict[str, float]) -> bool | None:
        success = metrics.get("eval/success")
        if self.threshold is None or success is None or success < self.threshold:
            return None
        print(f"held-out greedy success {success:.1%} reached the stop at {self.threshold:g}: stopping")
        self.stopped = True
        return False


class NoSignal(Callback):
    """Says when a batch gives RL nothing to learn from: every episode returned the same (no reward
    at all, say); for a group estimator, every group's episodes did (GRPO and RLOO advantages are
    then all 0); or no episode succeeded while the returns vary only by partial credit for a final
    answer (reasoning-gym's, GEM's, TextArena's), which reinforces noise. The first such batch of
    a run gets one line saying what would help; after ``patience`` such batches in a row the run
    stops (``stopped`` says why) instead of spending its budget on nothing (``patience=None``: it
    never stops)."""

    def __init__(self, patience: int | None = 3, say: Callable[[str], Any] = print, help: str | None = None):
        self.patience, self.say, self.help = patience, say, help_line() if help is None else help
        self.batches, self.in_a_row, self.warned = 0, 0, False
        self.stopped: str | None = None

    def on_collect(self, agent: Learner, batch: Trajectories) -> bool | None:
        self.batches += 1
        problem = no_signal(batch, agent.config.estimator != "gae")
        self.in_a_row = self.in_a_row + 1 if problem else 0
        if problem and not self.warned:
            self.warned = True
            self.say(f"warning: batch {self.batches}: {problem}: RL has nothing to reinforce. {self.help}")
        if problem and self.patience is not None and self.in_a_row >= self.patience:
            self.stopped = f"{self.in_a_row} batches in a row gave RL nothing to learn from (the last: {problem})"
            return False
        return None


HINTS = {
    "answer_format": "an answer format the model writes (--env-arg answer_format=final)",
    "config": "an easier task (--env-arg config=...)",
    "tools": "a tool (--tools calc)",
    "warmstart": "a warm start on the oracle (--warmstart-steps N)",
    "group": "a larger group",
}
"""What may give a run without signal one, by what the run would change (``help_line``)."""


def help_line(have: Collection[str] = ()) -> str:
    """The no-signal warning's advice: the ``HINTS`` but those the run ``have`` already.

    Example:
        >>> help_line({"tools", "answer_format", "config"})
        'A warm start on the oracle (--warmstart-steps N), or a larger group would help'
    """
    hints = [hint for key, hint in HINTS.items() if key not in have]
    text = ", ".join(hints[:-1]) + (", or " if len(hints) > 1 else "") + hints[-1]
    return text[0].upper() + text[1:] + " would help"


def no_signal(batch: Trajectories, grouped: bool) -> str | None:
    """What makes ``batch`` teach nothing, or ``None``: every return the same; with ``grouped``,
    every group's the same; or no success where every episode says whether it succeeded
    (``info["correct"]`` or ``info["is_success"]``) and earned its reward on its last turn only
    (partial credit for an answer, not progress along the way).

    Example:
        >>> from lmgym.agents.trajectories import Episode, Trajectories
        >>> flat = Trajectories([Episode([0, 1], [False, True], [1], [0.0], group=g) for g in (0, 0)])
        >>> no_signal(flat, grouped=True)
        'its 2 episodes all returned 0'
        >>> partial = [Episode([0, 1], [False, True], [1], [r], infos=[{"correct": False}]) for r in (0.1, 0.0)]
        >>> no_signal(Trajectories(partial), grouped=False)
        'none of its 2 episodes succeeded (the rewards, mean 0.05, are partial credit)'
    """
    returns = [round(e.return_, 9) for e in batch]
    groups: dict[int, set[float]] = {}
    for e, r in zip(batch, returns):
        groups.setdefault(e.group, set()).add(r)
    if len(set(returns)) <= 1:
        return f"its {len(batch)} episodes all returned {returns[0]:g}" if returns else "it is empty"
    if grouped and all(len(g) == 1 for g in groups.values()):
        return f"its {len(batch)} episodes returned the same within each of their {len(groups)} groups"
    says = all(e.infos and ("correct" in e.infos[-1] or "is_success" in e.infos[-1]) for e in batch)
    answer_only = all(not any(e.rewards[:-1]) for e in batch)
    if says and answer_only and not any(e.success for e in batch):
        mean = sum(returns) / len(returns)
        return f"none of its {len(batch)} episodes succeeded (the rewards, mean {mean:.2g}, are partial credit)"
    return None


def eval_metrics(stats: dict[str, Any]) -> dict[str, float]:
    """An evaluation as ``eval/`` metrics: success, mean return (a text world's score), tool-call
    rate and the error mix."""
    return {
        "eval/success": stats["success"],
        "eval/success_low": stats["success_ci"][0],
        "eval/success_high": stats["success_ci"][1],
        **({"eval/return": stats["mean_return"]} if "mean_return" in stats else {}),
        "eval/tool_rate": stats["tool_rate"],
        **{f"eval/error/{kind}": share for kind, share in stats.get("errors", {}).items() if kind != "correct"},
    }


__all__ = [
    "Callback",
    "CallbackLike",
    "CheckpointCallback",
    "Evaluator",
    "MetricsCallback",
    "HINTS",
    "NoSignal",
    "ProgressCallback",
    "RecordCallback",
    "StopAtSuccess",
    "eval_metrics",
    "fire",
    "help_line",
    "run_callbacks",
]
