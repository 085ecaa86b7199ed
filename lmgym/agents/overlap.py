"""The overlapped update (``PPOConfig.rollout.overlap_update``): the next batch is collected while
the update trains on this one.

``pipelined`` yields the batches ``learn`` trains on, from two functions it is given (it never
sees the agent): ``collect(n, version)``, which plays ``n`` episodes through an engine of its
own, and ``sync()``, which pushes the policy's weights to that engine and returns their version.
The first batch is collected in line; each next one starts in a background thread as soon as the
batch before it is in, from the weights of that moment, so it is collected during the update of
the batch before it and is one policy version stale when it is trained on: ``update`` then
recomputes its old log-probs under the current policy and weighs each token by
min(p_current / p_sampler, ``tis_cap``), the truncated importance sampling an inexact engine's
episodes get (every token is tagged with the version that sampled it, ``Episode.versions``). An
engine that shares the trainer's weights (the HF engine) is given a copy of them for the time
(``own_engine``: a ``SnapshotEngine``); the others (vLLM, Ray actors) hold their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lmgym.agents.engines import Engine, HFEngine, SnapshotEngine

if TYPE_CHECKING:
    from lmgym.agents.rollout import RolloutCollector
    from lmgym.agents.trajectories import Trajectories

Batches = Iterator[tuple["Trajectories", float]]


def batch_sizes(done: int, total: int, per_update: int, group_size: int) -> Iterator[int]:
    """Episodes of each batch from ``done`` to ``total``: ``per_update``, fewer at the end, whole groups.

    Example:
        >>> list(batch_sizes(0, 10, 4, 2))
        [4, 4, 2]
    """
    while done < total:
        n = max(group_size, min(per_update, total - done) // group_size * group_size)
        done += n
        yield n


def own_engine(engine: Engine) -> Engine:
    """An engine that generates from weights of its own while the policy trains: a copy of the
    policy for the HF engine (``SnapshotEngine``), the engine itself for the others."""
    if isinstance(engine, HFEngine) and not isinstance(engine, SnapshotEngine):
        return SnapshotEngine(engine.policy, engine.reuse_cache, engine.merge_lora)
    return engine


def timed(collect: Callable[[int, int], Trajectories], n: int, version: int) -> tuple[Trajectories, float]:
    started = time.perf_counter()
    batch = collect(n, version)
    return batch, time.perf_counter() - started


def pipelined(collect: Callable[[int, int], Trajectories], sync: Callable[[], int], sizes: Iterator[int]) -> Batches:
    """Each batch of ``sizes`` with the seconds it took, each next one collected while the caller
    updates on the one yielded (module docs)."""
    with ThreadPoolExecutor(1, thread_name_prefix="lmgym-collect") as pool:

        def start() -> Future | None:
            n = next(sizes, None)
            return None if n is None else pool.submit(timed, collect, n, sync())  # the policy as it is now

        pending = start()
        while pending is not None:
            batch, seconds = pending.result()
            pending = start()
            yield batch, seconds


def overlapped(
    collector: RolloutCollector, envs: Any, sizes: Iterator[int], group_size: int, version: Callable[[], int]
) -> Batches:
    """``pipelined`` over ``collector`` with an engine of its own (``own_engine``), synced to the
    policy's weights of the moment, tagged ``version()``."""
    engine = own_engine(collector.engine)
    own = collector.with_engine(engine)

    def sync() -> int:
        engine.sync_weights()
        return version()

    def collect(n: int, at: int) -> Trajectories:
        return own.collect(envs, n, group_size, version=at)

    return pipelined(collect, sync, sizes)


__all__ = ["Batches", "batch_sizes", "overlapped", "own_engine", "pipelined"]
