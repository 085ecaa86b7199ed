"""ConcurrentVectorEnv: a ``SyncVectorEnv`` whose sub-envs take their steps at the same time.

A step of an env with a tool (the sandboxed Python tool, a search, a test run) mostly waits on a
subprocess or a socket. ``SyncVectorEnv`` steps its sub-envs one after another, so sixteen tool
calls cost sixteen times one; here each sub-env's ``step`` runs in a thread of a pool, and the
results are put together by ``SyncVectorEnv``'s own code, so observations, rewards, flags, infos
and autoreset (``NEXT_STEP``, ``SAME_STEP``, ``DISABLED``) are exactly what it returns.

Sub-envs must not share mutable state (lmgym's envs do not: each has its own RNG, and the task
library adapters take a lock around the global RNG they use).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np  # noqa: F401 (the doctest uses it)
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate


class Prefetched(gym.Wrapper):
    """Returns the step result its vector env computed ahead, in a thread, for this action."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.pending: Future | None = None

    def step(self, action: Any) -> Any:
        if self.pending is None:
            return self.env.step(action)
        pending, self.pending = self.pending, None
        return pending.result()


class ConcurrentVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` with each sub-env's ``step`` in its own thread.

    Args:
        env_fns: functions that make the sub-envs, as for ``SyncVectorEnv``.
        max_workers: threads (default: one per sub-env).
        **kwargs: ``SyncVectorEnv``'s (``autoreset_mode``, ``copy``, ``observation_mode``).

    Example:
        >>> import lmgym
        >>> envs = ConcurrentVectorEnv([lambda: gym.make("lmgym/Echo-v0")] * 2)
        >>> obs, _ = envs.reset(seed=0)
        >>> tok = envs.get_attr("tokenizer")[0]
        >>> actions = tuple(np.array(tok.encode(o.split()[-1])) for o in obs)
        >>> envs.step(actions)[1].tolist()
        [1.0, 1.0]
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], max_workers: int | None = None, **kwargs: Any):
        super().__init__([_prefetched(fn) for fn in env_fns], **kwargs)
        self.pool = ThreadPoolExecutor(max_workers or len(self.envs), thread_name_prefix="lmgym-env")

    def step(self, actions: Any) -> Any:
        for i, (env, action) in enumerate(zip(self.envs, iterate(self.action_space, actions))):
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                continue  # SyncVectorEnv resets this one instead of stepping it
            env.pending = self.pool.submit(env.env.step, action)  # type: ignore[attr-defined]
        return super().step(actions)

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.shutdown(wait=True)
        super().close_extras(**kwargs)


def _prefetched(fn: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    return lambda: Prefetched(fn())
