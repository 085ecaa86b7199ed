"""RayVectorEnv: a vector env whose sub-envs live in Ray actors, spread over a cluster's machines.

Each actor (``EnvHost``) holds ``envs_per_actor`` sub-envs and steps them in its own thread pool
(a threaded actor), so tool calls overlap inside an actor as in ``ConcurrentVectorEnv`` and
across actors and machines. On the driver each sub-env is a ``RemoteEnv``: a ``gymnasium.Env``
whose ``reset`` and ``step`` are calls to its actor. ``RayVectorEnv`` is a ``ConcurrentVectorEnv``
of them: the steps of a vector step are sent at once, and ``SyncVectorEnv``'s own code puts the
results together, so observations, rewards, flags, infos and autoreset are exactly
``SyncVectorEnv``'s; the overlapped rollout gets each env back as soon as its step returns.

An actor that dies (its machine lost, its process killed) is started again, and each of its
sub-envs replays its episode there: the same reset seed and the same actions (lmgym envs are
deterministic under their seed), so the episode goes on where it was, neither lost nor played
twice; ``info["actor_restarts"]`` counts it on the step that saw it. Past ``max_restarts`` restarts
of one actor, ``lmgym.core.EnvError`` names the env and the seed.

Needs ``pip install 'lmgym[ray]'``. ``ray.init`` is the user's (a local cluster is started on
first use when there is none: ``ray.init(address="auto")`` joins a running one).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from lmgym.core import EnvError
from lmgym.processes import descendants, fate_share
from lmgym.vector.concurrent import ConcurrentVectorEnv

LOCAL_OBJECT_STORE = 256 * 2**20
"""Bytes of object store a local Ray started by lmgym gets: env steps move text, not tensors."""


def require_ray() -> Any:
    """``ray``, initialised (``init_local_ray`` when none is running), or an ImportError saying how to get it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("RayVectorEnv needs Ray: pip install 'lmgym[ray]'") from e
    if not ray.is_initialized():
        init_local_ray()
    return ray


def init_local_ray() -> None:
    """A local Ray instance without its dashboard, with a small object store, and quiet: no
    driver logs, and only errors from Ray's own logger (its INFO lines and the notice that token
    authentication is on are nothing a user acts on; authentication stays on)."""
    import logging

    import ray

    before = descendants(os.getpid())
    ray.init(
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=LOCAL_OBJECT_STORE,
    )
    fate_share(descendants(os.getpid()) - before)


def check_placement(actors: int, options: dict[str, Any]) -> None:
    """``ValueError`` at once when ``actors`` actors of ``options`` can never all run: one asks for
    more CPUs than any node has, or all of them together for more than the cluster has (a vector
    env's actors must all run at once). An actor without ``num_cpus`` holds a CPU only to be placed."""
    ray = require_ray()
    cpus = options.get("num_cpus")
    if not cpus:
        return
    nodes = [n.get("Resources", {}).get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
    total, free = sum(nodes), ray.available_resources().get("CPU", 0.0)
    if cpus > max(nodes, default=0.0) or actors * cpus > total:
        raise ValueError(
            f"RayVectorEnv: {actors} actor{'s' * (actors != 1)} of num_cpus={cpus:g} need {actors * cpus:g} CPUs at "
            f"once (each on one node); the cluster has {total:g} ({free:g} free, at most {max(nodes, default=0):g} "
            "on a node): leave num_cpus unset (an actor then holds a CPU only to be placed), ask for less, or put "
            "more envs in each actor (envs_per_actor=)"
        )


START_TIMEOUT = 120.0
"""Seconds an env actor may take to start before ``RayVectorEnv`` says the cluster cannot place it."""


class EnvHost:
    """The Ray actor that holds some sub-envs (made from their factories in the actor's process)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]):
        self.fns = list(env_fns)
        self.envs = [fn() for fn in self.fns]

    def describe(self, i: int) -> dict[str, Any]:
        env = self.envs[i]
        return {
            "observation_space": env.observation_space,
            "action_space": env.action_space,
            "metadata": env.metadata,
            "spec": env.spec,
            "render_mode": env.render_mode,
        }

    def reset(self, i: int, seed: int | None, options: dict[str, Any] | None) -> Any:
        return self.envs[i].reset(seed=seed, options=options)

    def replay(self, i: int, seed: int | None, options: dict[str, Any] | None, actions: list[Any]) -> None:
        """Plays an episode again up to where it was: its reset, then its actions."""
        self.envs[i].reset(seed=seed, options=options)
        for action in actions:
            self.envs[i].step(action)

    def step(self, i: int, action: Any) -> Any:
        return self.envs[i].step(action)

    def attr(self, i: int, name: str) -> tuple[bool, Any]:
        """``(True, None)`` for a method (called through ``call``), else ``(False, value)``."""
        value = self.envs[i].get_wrapper_attr(name)
        return (True, None) if callable(value) else (False, value)

    def call(self, i: int, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        return self.envs[i].get_wrapper_attr(name)(*args, **kwargs)

    def pid(self) -> int:
        import os

        return os.getpid()

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def close(self) -> None:
        for env in self.envs:
            env.close()


class ActorGroup:
    """One actor and the factories of its sub-envs; started again when it dies (``generation``
    counts its starts), at most ``max_restarts`` times."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]], options: dict[str, Any], max_restarts: int):
        self.fns, self.options, self.max_restarts = env_fns, options, max_restarts
        self.lock = threading.Lock()
        self.generation, self.restarts = 0, 0
        self.owners: dict[int, RemoteEnv | None] = {}  # sub-env index -> the RemoteEnv that plays it now
        self.actor = self.start()

    def start(self) -> Any:
        """A new actor, once it runs; ``RuntimeError`` if Ray cannot place it within
        ``START_TIMEOUT`` seconds (the cluster lacks what it asks for: the vector env would wait
        for ever, since all its actors must run at once)."""
        ray = require_ray()
        from ray.exceptions import GetTimeoutError, RayActorError

        actor = ray.remote(EnvHost).options(**self.options).remote(self.fns)
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=START_TIMEOUT)
        except RayActorError as e:  # making its envs raised: the last line of the actor's traceback says what
            said = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise RuntimeError(f"a RayVectorEnv actor could not make its envs: {said[-1][:300] if said else e}") from e
        except GetTimeoutError:
            ray.kill(actor)
            free = ray.available_resources().get("CPU", 0)
            cpus = self.options.get("num_cpus")
            raise RuntimeError(
                f"a RayVectorEnv actor did not start within {START_TIMEOUT:g} s: it asks for "
                f"{'Ray default of 1' if cpus is None else f'{cpus:g}'} CPU to be placed and the cluster has "
                f"{free:g} free; ask for less (num_cpus=) or put more envs in each actor (envs_per_actor=)"
            ) from None
        return actor

    def recycle(self, index: int) -> None:
        """Sub-env ``index``'s call is stuck: its ``RemoteEnv`` is retired (it stops at its next
        call) and the actor killed and started again (a stuck call holds one of its threads for
        ever; a process can be killed), its other sub-envs replaying their episodes there. Not
        counted in ``restarts``."""
        import ray

        with self.lock:
            self.owners[index] = None
            with contextlib.suppress(Exception):
                ray.kill(self.actor)
            self.generation += 1
            self.actor = self.start()

    def restart(self, seen: int, why: Exception) -> int:
        """Starts the actor again, unless another sub-env did since generation ``seen``; returns
        the generation now. Past ``max_restarts``, raises ``why``."""
        with self.lock:
            if self.generation == seen:
                if self.restarts >= self.max_restarts:
                    raise why
                self.restarts += 1
                self.generation += 1
                self.actor = self.start()
            return self.generation


class RemoteEnv(gym.Env):
    """A sub-env in a Ray actor, seen from the driver (``RayVectorEnv`` makes them). It keeps its
    episode's reset arguments and actions, to replay them in a restarted actor."""

    def __init__(self, group: ActorGroup, index: int, position: int = 0):
        self.group, self.index, self.position = group, index, position  # in its actor, in the vector env
        self.generation = group.generation
        group.owners[index] = self
        self.episode: tuple[int | None, dict[str, Any] | None] | None = None
        self.actions: list[Any] = []
        self.restarted = False  # whether the last call saw the actor die (and start again)
        info = self.remote("describe")
        self.observation_space, self.action_space = info["observation_space"], info["action_space"]
        self.metadata, self.spec, self.render_mode = info["metadata"], info["spec"], info["render_mode"]

    def remote(self, method: str, *args: Any) -> Any:
        """``method`` of the actor, for this sub-env; an actor that died is started again (this
        sub-env's episode replayed there) and asked again."""
        import ray
        from ray.exceptions import RayActorError

        while True:
            if self.group.owners.get(self.index) is not self:  # given up on after a timeout (recycle)
                raise EnvError("this sub-env was replaced after a timeout", index=self.position, env_id=None)
            try:
                if self.generation != self.group.generation:  # the actor was started again: catch up
                    self.catch_up()
                return ray.get(getattr(self.group.actor, method).remote(self.index, *args))
            except RayActorError as e:
                self.restarted = True
                try:
                    self.group.restart(self.generation, e)
                except RayActorError as last:
                    raise self.died(last) from last

    def catch_up(self) -> None:
        import ray

        self.generation = self.group.generation
        if self.episode is not None:
            seed, options = self.episode
            ray.get(self.group.actor.replay.remote(self.index, seed, options, self.actions))

    def died(self, error: Exception) -> EnvError:
        seed = self.episode[0] if self.episode else None
        return EnvError(
            f"its Ray actor died {self.group.restarts + 1} times, more than max_restarts={self.group.max_restarts} "
            f"({type(error).__name__}: {str(error).splitlines()[0][:300]})",
            index=self.position,
            env_id=getattr(self.spec, "id", None),
            seed=seed,
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.episode, self.actions, self.restarted = (seed, options), [], False
        return self.remote("reset", seed, options)

    def step(self, action: Any) -> Any:
        self.restarted = False
        obs, reward, terminated, truncated, info = self.remote("step", action)
        self.actions.append(action)
        if self.restarted:
            info = {**info, "actor_restarts": 1}
        return obs, reward, terminated, truncated, info

    def get_wrapper_attr(self, name: str) -> Any:
        if name in ("observation_space", "action_space", "metadata", "spec", "render_mode", "np_random"):
            return getattr(self, name)
        method, value = self.remote("attr", name)
        if not method:
            return value
        return lambda *args, **kwargs: self.remote("call", name, args, kwargs)

    def render(self) -> Any:
        return self.remote("call", "render", (), {})

    def close(self) -> None:
        pass  # RayVectorEnv closes the actors


class RayVectorEnv(ConcurrentVectorEnv):
    """A ``ConcurrentVectorEnv`` whose sub-envs live in Ray actors (module docs).

    Args:
        env_fns: functions that make the sub-envs, as for ``SyncVectorEnv`` (they are pickled to
            the actors: module-level functions, or lambdas of picklable things).
        envs_per_actor: sub-envs per actor (stepped in the actor's threads).
        num_cpus: CPUs each actor holds while it lives (fractional allowed, e.g. 0.25); ``None``
            (the default) is Ray's own for an actor: one CPU to be placed and none while it runs, so
            any number of env actors (which mostly wait on tools) start on a 2-CPU machine. A
            placement that can never fit is a ``ValueError`` at once.
        max_restarts: how many times an actor that dies is started again before ``EnvError``.
        actor_options: more ``ray.remote`` options for the actors (e.g. ``{"resources": ...}``;
            the default spreads the actors over the cluster's machines).
        **kwargs: ``ConcurrentVectorEnv``'s (``autoreset_mode``, ``step_timeout``, ``on_env_error``).

    Example:
        >>> import ray, lmgym
        >>> _ = ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        >>> envs = RayVectorEnv([lambda: gym.make("lmgym/Echo-v0")] * 2)
        >>> list(envs.reset(seed=[0, 1])[0])
        ['Echo: dcc\\n', 'Echo: bcd\\n']
        >>> envs.close(); ray.shutdown()
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        envs_per_actor: int = 1,
        num_cpus: float | None = None,
        max_restarts: int = 3,
        actor_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        if envs_per_actor < 1 or max_restarts < 0 or (num_cpus is not None and not 0 <= num_cpus < float("inf")):
            raise ValueError(f"envs_per_actor must be >= 1, max_restarts and num_cpus >= 0, got num_cpus={num_cpus}")
        fns = list(env_fns)
        # threads for each sub-env, and as many spare for the fresh envs that replace stuck ones
        options: dict[str, Any] = {"max_concurrency": 2 * envs_per_actor, "scheduling_strategy": "SPREAD"}
        options.update({"num_cpus": num_cpus} if num_cpus is not None else {})
        options.update(actor_options or {})
        chunks = [fns[i : i + envs_per_actor] for i in range(0, len(fns), envs_per_actor)]
        check_placement(len(chunks), options)
        with ThreadPoolExecutor(max(1, len(chunks))) as pool:  # actors start in parallel
            starts = [pool.submit(ActorGroup, chunk, options, max_restarts) for chunk in chunks]
        failed = [e for e in (f.exception() for f in starts) if e is not None]
        if failed:  # none left behind holding the cluster's CPUs
            for f in starts:
                if f.exception() is None:
                    require_ray().kill(f.result().actor)
            raise failed[0]
        self.groups = [f.result() for f in starts]
        remotes = [(group, i) for group in self.groups for i in range(len(group.fns))]
        makers = [functools.partial(self.remote_env, group, i, p) for p, (group, i) in enumerate(remotes)]
        super().__init__(makers, **kwargs)

    def remote_env(self, group: ActorGroup, index: int, position: int) -> RemoteEnv:
        """Sub-env ``index`` of ``group``'s actor (``position`` in this vector env). When the guard
        replaces it (a step past its deadline, an error with ``on_env_error="skip"``), the actor is
        started again (``ActorGroup.recycle``): no thread stays stuck in it."""
        if getattr(self, "envs", None) is not None:
            group.recycle(index)
        return RemoteEnv(group, index, position)

    @property
    def restarts(self) -> int:
        """Actor restarts so far, all actors together."""
        return sum(group.restarts for group in self.groups)

    def close_extras(self, **kwargs: Any) -> None:
        super().close_extras(**kwargs)
        import ray

        for group in self.groups if ray.is_initialized() else []:
            # an actor that is gone, or of a Ray session that ended; one whose close hangs is killed still
            with contextlib.suppress(Exception):
                ray.get(group.actor.close.remote(), timeout=10)
            with contextlib.suppress(Exception):
                ray.kill(group.actor)


__all__ = ["ActorGroup", "EnvHost", "RayVectorEnv", "RemoteEnv", "check_placement", "init_local_ray", "require_ray"]
