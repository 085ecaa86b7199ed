"""Vector envs for lmgym's envs: sub-envs that cannot stall or obscure a run, and step at once.

- ``ConcurrentVectorEnv`` (``concurrent``): a ``SyncVectorEnv`` whose sub-envs are guarded
  (``Guarded``: a deadline on every ``reset`` and ``step``, errors that name the env) and take
  their steps in threads, so tool calls overlap. Its results are exactly ``SyncVectorEnv``'s.
- ``RayVectorEnv`` (``remote``): the same, with the sub-envs in Ray actors, spread over the
  machines of a Ray cluster (``pip install 'lmgym[ray]'``; Ray is imported only here).

``make_vec(env_id, num_envs, backend=...)`` makes either (or Gymnasium's sync and async ones);
the tool envs are registered with it as their ``vector_entry_point``, so that
``gym.make_vec("lmgym/PythonTool-v0", num_envs=16)`` steps its sandboxed calls concurrently, and
``gym.make_vec("lmgym/PythonTool-v0", num_envs=16, backend="ray")`` in Ray actors.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv  # noqa: F401 (AutoresetMode: the doctest)

from lmgym.vector.concurrent import (
    DEFAULT_STEP_TIMEOUT,
    ON_ERROR,
    Borrowed,
    ConcurrentVectorEnv,
    Guarded,
    guarded,
    reset_problem,
    step_problem,
)

BACKENDS = ("concurrent", "ray", "sync", "async")
VECTOR_KWARGS = ("autoreset_mode", "copy", "observation_mode", "max_workers", "step_timeout", "on_env_error")
RAY_KWARGS = ("envs_per_actor", "num_cpus", "max_restarts", "actor_options")


def make_vec(env_id: str, num_envs: int = 1, backend: str = "concurrent", **kwargs: Any) -> VectorEnv:
    """``num_envs`` copies of ``env_id`` in a vector env of ``backend``: ``"concurrent"``
    (``ConcurrentVectorEnv``), ``"ray"`` (``RayVectorEnv``), or Gymnasium's ``"sync"`` and
    ``"async"``. ``kwargs`` go to ``gym.make``, but for the vector env's own (``autoreset_mode``,
    ``step_timeout``, ``max_workers``, ...; for Ray ``envs_per_actor``, ``num_cpus``, ...).

    Example:
        >>> import lmgym
        >>> envs = make_vec("lmgym/Echo-v0", num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP)
        >>> type(envs).__name__, list(envs.reset(seed=[0, 1])[0])
        ('ConcurrentVectorEnv', ['Echo: dcc\\n', 'Echo: bcd\\n'])
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    own = {k: kwargs.pop(k) for k in [*VECTOR_KWARGS, *RAY_KWARGS] if k in kwargs}
    spec = gym.spec(env_id)
    env_kwargs = {k: v for k, v in kwargs.items() if k not in ("vectorization_mode", "num_envs")}

    def make_one() -> gym.Env:
        return gym.make(spec, **env_kwargs)

    fns = [make_one] * num_envs
    if backend == "ray":
        from lmgym.vector.remote import RayVectorEnv

        return RayVectorEnv(fns, **own)
    if backend == "concurrent":
        return ConcurrentVectorEnv(fns, **own)
    for key in ("max_workers", "step_timeout", "on_env_error", *RAY_KWARGS):
        if key in own:
            raise ValueError(f"{key} is for the concurrent and ray backends, not {backend!r}")
    return (SyncVectorEnv if backend == "sync" else AsyncVectorEnv)(fns, **own)


def __getattr__(name: str) -> Any:  # RayVectorEnv imports Ray's module only when asked for
    if name == "RayVectorEnv":
        from lmgym.vector.remote import RayVectorEnv

        return RayVectorEnv
    raise AttributeError(f"module 'lmgym.vector' has no attribute {name!r}")


def vector_entry_point(env_id: str) -> Any:
    """The ``vector_entry_point`` an env is registered with: ``gym.make_vec`` then calls
    ``make_vec(env_id, num_envs, **kwargs)`` (concurrent unless ``backend=`` says otherwise).
    A ``functools.partial``, so that the env's spec, and the env with it, still pickles."""
    return functools.partial(make_vec, env_id)


__all__ = [
    "BACKENDS",
    "DEFAULT_STEP_TIMEOUT",
    "ON_ERROR",
    "Borrowed",
    "ConcurrentVectorEnv",
    "Guarded",
    "RayVectorEnv",
    "guarded",
    "make_vec",
    "reset_problem",
    "step_problem",
    "vector_entry_point",
]
