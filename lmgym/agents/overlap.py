"""The overlapped update (``PPOConfig.rollout.overlap_update``): the next batch is collected while
the update trains on this one.

``overlapped_batches`` yields the batches ``learn`` trains on. The first is collected in line;
each next one starts in a background thread as soon as the batch before it is in, with the
engine synced to the policy of that moment, so it is collected during the update of the batch
before it and is one policy version stale when it is trained on: ``update`` then recomputes its
old log-probs under the current policy and weighs each token by min(p_current / p_sampler,
``tis_cap``), the truncated importance sampling an inexact engine's episodes get (every token is
tagged with the version that sampled it, ``Episode.versions``). An engine that shares the
trainer's weights (the HF engine) is given a copy of them for the time (``SnapshotEngine``); the
others (vLLM, Ray actors) hold their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lmgym.agents.engines import HFEngine, SnapshotEngine

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent
    from lmgym.agents.trajectories import Trajectories


def batch_size(agent: PPOAgent, total_episodes: int, done: int) -> int:
    """Episodes of the next batch after ``done``: ``episodes_per_update``, fewer at the end, whole groups."""
    k = agent.config.group_size or 1
    return max(k, min(agent.config.episodes_per_update, total_episodes - done) // k * k)


@contextmanager
def own_weights(agent: PPOAgent) -> Iterator[None]:
    """The agent's engine, for the block, generates from weights of its own, synced by the caller."""
    engine = agent.engine
    if isinstance(engine, HFEngine) and not isinstance(engine, SnapshotEngine):
        agent.engine = SnapshotEngine(engine.policy, engine.reuse_cache)
    agent.overlapping = True
    try:
        yield
    finally:
        agent.engine, agent.overlapping = engine, False
        agent.sync_engine()


def timed_collect(agent: PPOAgent, envs: Any, n: int) -> tuple[Trajectories, float]:
    started = time.perf_counter()
    batch = agent.collect(envs, n, score=False)  # scored by update, in the trainer's thread
    return batch, time.perf_counter() - started


def overlapped_batches(agent: PPOAgent, envs: Any, total_episodes: int) -> Iterator[tuple[Trajectories, float]]:
    """``learn``'s batches, each next one collected while the caller updates on the one yielded
    (module docs); with each, the seconds its collection took."""
    with own_weights(agent), ThreadPoolExecutor(1, thread_name_prefix="lmgym-collect") as pool:
        planned = agent.num_episodes

        def start() -> Future:
            nonlocal planned
            n = batch_size(agent, total_episodes, planned)
            planned += n
            agent.sync_engine()  # the policy as it is now samples the next batch
            return pool.submit(timed_collect, agent, envs, n)

        pending: Future | None = start()
        while pending is not None:
            batch, seconds = pending.result()
            pending = start() if planned < total_episodes else None
            yield batch, seconds


__all__ = ["batch_size", "overlapped_batches", "own_weights"]
