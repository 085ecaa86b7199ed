"""Vector envs whose sub-envs cannot stall or obscure a run, and step at the same time.

``Guarded`` wraps one sub-env of a vector env. Each ``reset`` and ``step`` runs with a deadline
(``step_timeout`` seconds): a step past it ends that episode as truncated, reward 0,
``info["timeout"] = True``; the stuck env is abandoned (a Python thread cannot be killed: it is
left running as a daemon, and a lock it holds that other envs need, ``lmgym.compat.OwnRNG``'s,
is handed to them anew) and a fresh env is made from its factory. A reset past its deadline is
retried once in a fresh env. What a sub-env raises, or returns that the Gym API does not allow,
comes out as one ``lmgym.core.EnvError`` naming the sub-env, the env id, the seed, the turn and
the action, the original exception chained; with ``on_error="skip"`` a failing step (or reset)
ends the episode instead, truncated, ``info["env_error"]`` saying why, and the env is replaced
(the agent drops such episodes, up to a limit).

``ConcurrentVectorEnv`` is a ``SyncVectorEnv`` of guarded sub-envs whose steps run in threads:
a step of an env with a tool (the sandboxed Python tool, a search, a test run) mostly waits on a
subprocess or a socket, so sixteen tool calls cost about one. The results are put together by
``SyncVectorEnv``'s own code, so observations, rewards, flags, infos and autoreset
(``NEXT_STEP``, ``SAME_STEP``, ``DISABLED``) are exactly what it returns. Sub-envs must not share
mutable state (lmgym's envs do not: each has its own RNG, and the task library adapters take a
lock around the global RNG they use). ``guarded(vec, ...)`` gives a plain ``SyncVectorEnv`` the
same guards without touching it (the agent does this for the vector envs it collects from).
"""

from __future__ import annotations

import functools
import math
import numbers
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import iterate

from lmgym.core import EnvError, StuckError, Worker, abandon, call_with_timeout, check_timeout

DEFAULT_STEP_TIMEOUT = 300.0
"""Seconds a sub-env's step or reset may take when nobody says otherwise: far past any normal step
(a sandboxed tool call is killed at 10 s), and still an end to a stall."""
ON_ERROR = ("raise", "skip")
CLOSE_TIMEOUT = 10.0
"""Seconds a sub-env's ``close`` may take before it is left to finish in the background."""


class Guarded(gym.Wrapper):
    """One sub-env of a vector env, with a deadline on each call and named errors (module docs).

    Args:
        env: the sub-env.
        index: its place in the vector env (named in errors).
        factory: what made it, to make a fresh one after a timeout or, with ``on_error="skip"``,
            an error (``None``: a timeout then raises ``EnvError``).
        step_timeout: seconds a ``step`` or ``reset`` may take (``None``: ``DEFAULT_STEP_TIMEOUT``
            unless ``configure`` sets it).
        on_error: ``"raise"`` (an ``EnvError``) or ``"skip"`` (the episode ends, truncated).
    """

    def __init__(
        self,
        env: gym.Env,
        index: int = 0,
        factory: Callable[[], gym.Env] | None = None,
        step_timeout: float | None = None,
        on_error: str | None = None,
    ):
        super().__init__(env)
        self.index, self.factory = index, factory
        self.step_timeout, self.on_error = check_timeout("step_timeout", step_timeout), on_error
        if on_error not in (None, *ON_ERROR):
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.seed: int | None = None
        self.turn = 0
        self.broken: str | None = None  # why its last reset failed, with on_error="skip"
        self.faults: Counter[str] = Counter()
        self.worker = Worker(f"lmgym-env-{index}")  # runs the env's calls, each with a deadline

    def configure(self, step_timeout: float | None, on_error: str | None) -> None:
        """Fills the settings this sub-env was not given explicitly (the agent's config)."""
        self.step_timeout = self.step_timeout or check_timeout("step_timeout", step_timeout)
        self.on_error = self.on_error or on_error

    @property
    def deadline(self) -> float:
        return self.step_timeout or DEFAULT_STEP_TIMEOUT

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        self.seed, self.turn, self.broken = seed, 0, None
        for attempt in (1, 2):
            try:
                done, result = self.worker.call(self.env.reset, seed=seed, options=options, timeout=self.deadline)
            except StuckError as e:
                raise self.error(str(e)) from e
            except EnvError as e:
                return self.failed_reset(e)
            except Exception as e:
                return self.failed_reset(self.error(f"reset raised {type(e).__name__}: {str(e)[:500]}"), e)
            if done:
                problem = reset_problem(result, self.observation_space)
                return self.failed_reset(self.error(problem)) if problem else result
            self.faults["reset_timeouts"] += 1
            if attempt == 1:
                self.replace(f"reset did not return within {self.deadline:g} s")
        why = f"reset did not return within {self.deadline:g} s, twice (in a fresh env the second time)"
        return self.failed_reset(self.error(why))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.turn += 1
        if self.broken is not None:  # its reset failed (on_error="skip"): the episode ends here
            return "", 0.0, False, True, {"env_error": self.broken}
        action = np.array(action, copy=True)  # an env that writes into it cannot rewrite the recorded tokens
        try:
            done, result = self.worker.call(self.env.step, action, timeout=self.deadline)
        except StuckError as e:
            raise self.error(str(e), action) from e
        except EnvError as e:  # it names its env already (a remote sub-env's)
            return self.failed(e)
        except Exception as e:
            return self.failed(self.error(f"step raised {type(e).__name__}: {str(e)[:500]}", action), e)
        if not done:
            self.faults["timeouts"] += 1
            self.replace(f"step did not return within {self.deadline:g} s")
            return "", 0.0, False, True, {"timeout": True, "step_timeout": self.deadline}
        problem = step_problem(result, self.observation_space)
        return self.failed(self.error(problem, action)) if problem else result

    def close(self) -> None:
        """Closes the env within ``CLOSE_TIMEOUT`` seconds; past it, it is left to finish."""
        try:
            self.worker.call(self.env.close, timeout=CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001 (a failing close loses nothing: the episodes are in)
            pass
        finally:
            self.worker.close()

    def failed(self, error: EnvError, cause: BaseException | None = None) -> tuple[Any, float, bool, bool, dict]:
        """``on_error="skip"``: the episode ends, truncated, in a fresh env; else ``error`` is raised."""
        if self.on_error != "skip":
            raise error from cause if cause is not None else error.__cause__
        self.faults["errors"] += 1
        self.replace(str(error))
        return "", 0.0, False, True, {"env_error": str(error)}

    def failed_reset(self, error: EnvError, cause: BaseException | None = None) -> tuple[Any, dict]:
        """``on_error="skip"``: the episode starts empty in a fresh env and its first step ends it,
        truncated, with ``info["env_error"]``; else ``error`` is raised."""
        if self.on_error != "skip":
            raise error from cause if cause is not None else error.__cause__
        self.faults["errors"] += 1
        self.replace(str(error))
        self.broken = str(error)
        return "", {"env_error": str(error)}

    def replace(self, why: str) -> None:
        """Abandons the env for a fresh one from the factory, made within the deadline (the old one
        is closed in the background, and counted among the stuck threads until it is)."""
        if self.factory is None:
            raise self.error(f"{why}, and there is no factory to make a fresh env from")
        old = self.env
        closing = threading.Thread(target=_close_quietly, args=(old,), daemon=True, name="lmgym-abandoned-env")
        closing.start()
        try:
            abandon(closing)
            done, fresh = call_with_timeout(self.factory, timeout=self.deadline)
        except StuckError as e:
            raise self.error(str(e)) from e
        except Exception as e:
            raise self.error(f"{why}, and making a fresh env raised {type(e).__name__}: {str(e)[:300]}") from e
        if not done:
            raise self.error(f"{why}, and making a fresh env did not return within {self.deadline:g} s")
        self.env = fresh

    def error(self, problem: str, action: Any = None) -> EnvError:
        spec = getattr(self.env, "spec", None)
        return EnvError(
            problem,
            index=self.index,
            env_id=getattr(spec, "id", None) or type(self.env.unwrapped).__name__,
            seed=self.seed,
            turn=self.turn if action is not None else None,
            action=None if action is None else self.action_text(action),
        )

    def action_text(self, action: Any) -> str:
        try:
            return str(self.env.get_wrapper_attr("tokenizer").decode([int(i) for i in action]))
        except Exception:  # noqa: BLE001 (an action that does not decode is shown as its ids)
            return repr(list(action)[:50])


def step_problem(result: Any, space: gym.Space) -> str | None:
    """What is wrong with a step's return value, naming the field and what was expected."""
    if not isinstance(result, tuple) or len(result) != 5:
        return f"step returned {type(result).__name__}, expected (observation, reward, terminated, truncated, info)"
    obs, reward, terminated, truncated, info = result
    problem = reset_problem((obs, info), space)
    if problem:
        return problem
    if not isinstance(reward, numbers.Real) or not math.isfinite(float(reward)):
        return f"reward: expected a finite number, got {type(reward).__name__} {reward!r:.60}"
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            return f"{name}: expected a bool, got {type(flag).__name__} {flag!r:.60}"
    return None


def reset_problem(result: Any, space: gym.Space) -> str | None:
    """What is wrong with a reset's return value (``(observation, info)``)."""
    if not isinstance(result, tuple) or len(result) != 2:
        return f"returned {type(result).__name__}, expected (observation, info)"
    obs, info = result
    if not space.contains(obs):
        return f"observation: expected a value of the observation space {space}, got {type(obs).__name__} {obs!r:.60}"
    if not isinstance(info, dict):
        return f"info: expected a dict, got {type(info).__name__} {info!r:.60}"
    return None


class Prefetched(Guarded):
    """A guarded sub-env that returns the step result its vector env computed ahead, in a thread."""

    pending: Future | None = None

    def step(self, action: Any) -> Any:
        if self.pending is None:
            return super().step(action)
        pending, self.pending = self.pending, None
        return pending.result()


class ConcurrentVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` with each sub-env guarded and its ``step`` in its own thread.

    Args:
        env_fns: functions that make the sub-envs, as for ``SyncVectorEnv``.
        max_workers: threads (default: one per sub-env).
        step_timeout: seconds a sub-env's step or reset may take (``Guarded``; ``None``: the
            agent's ``PPOConfig.rollout.step_timeout``, else ``DEFAULT_STEP_TIMEOUT``).
        on_env_error: ``"raise"`` or ``"skip"`` (``None``: the agent's config, else raise).
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

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        max_workers: int | None = None,
        step_timeout: float | None = None,
        on_env_error: str | None = None,
        **kwargs: Any,
    ):
        def guarded(i: int, fn: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
            return lambda: Prefetched(fn(), i, fn, step_timeout, on_env_error)

        super().__init__([guarded(i, fn) for i, fn in enumerate(env_fns)], **kwargs)
        self.pool = ThreadPoolExecutor(max_workers or len(self.envs), thread_name_prefix="lmgym-env")
        self.ended = np.zeros(self.num_envs, dtype=bool)  # which sub-envs NEXT_STEP autoreset resets next

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        self.ended = np.zeros(self.num_envs, dtype=bool)
        return super().reset(seed=seed, options=options)

    def step(self, actions: Any) -> Any:
        for i, (env, action) in enumerate(zip(cast(list[Prefetched], self.envs), iterate(self.action_space, actions))):
            if self.autoreset_mode == AutoresetMode.NEXT_STEP and self.ended[i]:
                continue  # SyncVectorEnv resets this one instead of stepping it
            env.pending = self.pool.submit(Guarded.step, env, action)
        obs, rewards, terminated, truncated, infos = super().step(actions)
        self.ended = np.logical_or(terminated, truncated)
        return obs, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)  # a stuck step's thread is not waited for
        super().close_extras(**kwargs)


class Borrowed(SyncVectorEnv):
    """A ``SyncVectorEnv`` over sub-envs someone else owns: closing it (or dropping it) leaves them
    open. ``guarded`` and the agent's single-env view make these."""

    def close_extras(self, **kwargs: Any) -> None:
        pass


def guarded(vec: VectorEnv, step_timeout: float | None = None, on_error: str | None = None) -> VectorEnv:
    """``vec`` with every sub-env ``Guarded``, ``vec`` itself untouched: a ``ConcurrentVectorEnv``
    as it is (its sub-envs are guarded; the settings they were not given are filled in); a plain
    ``SyncVectorEnv``'s sub-envs stepped through guards in a ``Borrowed`` vector env of their own
    (the fresh envs made from its ``env_fns``); any other (an ``AsyncVectorEnv``, whose sub-envs
    live in other processes) as it is: its errors come back as raised."""
    if isinstance(vec, ConcurrentVectorEnv):
        for env in cast(list[Guarded], vec.envs):
            env.configure(step_timeout, on_error)
        return vec
    if type(vec) is not SyncVectorEnv:
        return vec
    fns = list(getattr(vec, "env_fns", [None] * vec.num_envs))
    wrapped = [Guarded(env, i, fns[i], step_timeout, on_error) for i, env in enumerate(vec.envs)]
    return Borrowed(
        [functools.partial(_same, env) for env in wrapped], autoreset_mode=vec.autoreset_mode, copy=vec.copy
    )


def _same(env: gym.Env) -> gym.Env:
    return env


def _close_quietly(env: gym.Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 (an abandoned env's close may fail as its step did)
        pass


__all__ = [
    "Borrowed",
    "ConcurrentVectorEnv",
    "DEFAULT_STEP_TIMEOUT",
    "Guarded",
    "guarded",
    "reset_problem",
    "step_problem",
]
