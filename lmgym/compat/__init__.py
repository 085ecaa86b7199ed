"""The task libraries users already have, as lmgym environments.

Each library is an optional extra, imported only when one of its envs is made:

=========================  ========================  ================================================
id                         extra                     what it wraps
=========================  ========================  ================================================
lmgym/ReasoningGym-v0      ``lmgym[reasoning-gym]``  any ``reasoning_gym.create_dataset`` task
lmgym/TextArena-v0         ``lmgym[textarena]``      TextArena games, single- and two-player
lmgym/GEM-v0               ``lmgym[gem]``            GEM envs (``lmgym.compat.gem.make(env_id)``)
lmgym/TextWorld-v0         ``lmgym[textworld]``      TextWorld's generated games (``tw-simple``, ...)
lmgym/TextWorldExpress-v0  ``lmgym[textworld]``      TextWorld Express games
lmgym/ScienceWorld-v0      ``lmgym[scienceworld]``   ScienceWorld's 30 science tasks
lmgym/SkyRL-v0             ``lmgym[skyrl]``          skyrl-gym envs, or your own ``BaseTextEnv``
lmgym/Verifiers-v0         ``lmgym[verifiers]``      a verifiers v1 taskset through its harness
=========================  ========================  ================================================

Every adapter is an ``LMEnv``: string observations, ``TokenSequence`` actions, the env's
tokenizer, ``check_env``, seeding and vector envs, like the shipped envs. Libraries that draw from
Python's or numpy's global RNG get a stream of their own per env (``OwnRNG``), seeded by
``reset(seed=...)``, so a seed reproduces an episode whatever other envs in the process do.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

from lmgym.core import ABANDONED

# id -> (entry point, max_episode_steps, extra, module)
COMPAT: dict[str, tuple[str, int, str, str]] = {
    "lmgym/ReasoningGym-v0": ("lmgym.compat.reasoning_gym:ReasoningGymEnv", 16, "reasoning-gym", "reasoning_gym"),
    "lmgym/TextArena-v0": ("lmgym.compat.textarena:TextArenaEnv", 200, "textarena", "textarena"),
    "lmgym/GEM-v0": ("lmgym.compat.gem:GEMEnv", 200, "gem", "gem"),
    "lmgym/TextWorld-v0": ("lmgym.compat.textworld:TextWorldEnv", 50, "textworld", "textworld"),
    "lmgym/TextWorldExpress-v0": ("lmgym.compat.worlds:TextWorldExpressEnv", 50, "textworld", "textworld_express"),
    "lmgym/ScienceWorld-v0": ("lmgym.compat.worlds:ScienceWorldEnv", 100, "scienceworld", "scienceworld"),
    "lmgym/SkyRL-v0": ("lmgym.compat.skyrl:SkyRLEnv", 64, "skyrl", "skyrl_gym"),
    "lmgym/Verifiers-v0": ("lmgym.compat.verifiers:VerifiersEnv", 32, "verifiers", "verifiers"),
}
"""The adapters: registered with ``import lmgym``; their libraries load only when one is made."""


class LibraryError(RuntimeError):
    """The wrapped library failed or needs what this machine lacks (the network, Docker): the
    message names the env, the task and, for a step, the action."""


def require(module: str, extra: str) -> ModuleType:
    """Imports ``module``, or says in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"this env needs {module}: pip install 'lmgym[{extra}]' ({e})") from e


def check_name(kind: str, name: str, names: list[str], extra: str) -> None:
    """``ValueError`` for a task, game or env the library does not have, with the closest names.

    Example:
        >>> check_name("reasoning-gym task", "chain_sums", ["chain_sum", "gcd"], "reasoning-gym")
        Traceback (most recent call last):
        ...
        ValueError: unknown reasoning-gym task 'chain_sums'; did you mean chain_sum?
    """
    if name in names:
        return
    import difflib

    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; lmgym list --tasks {extra} names them"
    raise ValueError(f"unknown {kind} {name!r}{hint}")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


TASK_LIBRARIES = ["reasoning-gym", "textarena", "gem", "textworld", "scienceworld", "skyrl"]
"""The extras ``task_names`` (``lmgym list --tasks``) lists the tasks of."""


def task_names(extra: str) -> list[str]:
    """The task (or game, or env) names a library offers: ``lmgym list --tasks EXTRA``."""
    if extra == "reasoning-gym":
        return sorted(require("reasoning_gym.factory", extra).DATASETS)
    if extra == "textarena":
        return sorted(i for i in require("textarena.envs.registration", extra).ENV_REGISTRY if not i.endswith("-raw"))
    if extra == "gem":
        require("gem", extra)
        return sorted(importlib.import_module("gem.envs.registration").ENV_REGISTRY)
    if extra == "textworld":
        from lmgym.compat.textworld import DEFAULT_SETTINGS
        from lmgym.compat.worlds import TextWorldExpressEnv

        return [*DEFAULT_SETTINGS, *(f"express:{game}" for game in TextWorldExpressEnv.GAMES)]
    if extra == "scienceworld":
        from lmgym.compat.worlds import science_tasks

        return science_tasks()
    if extra == "skyrl":
        require("skyrl_gym", extra)
        return sorted(importlib.import_module("skyrl_gym.envs.registration").registry)
    raise ValueError(f"unknown task library {extra!r}: one of {TASK_LIBRARIES}")


class OwnRNG:
    """Python's and numpy's global RNG states kept for one env: ``with rng:`` swaps them in for
    the library call and back out after, so the library's draws are the env's own stream.

    Example:
        >>> a, b = OwnRNG(), OwnRNG()
        >>> a.seed(1); b.seed(1)
        >>> with a: x = random.random()
        >>> _ = random.random()  # the caller's own draws do not move a's or b's stream
        >>> with b: y = random.random()
        >>> x == y
        True
    """

    LOCK = threading.RLock()
    """Held while a library draws from the global RNG, so envs stepped in threads
    (``ConcurrentVectorEnv``) never see each other's state. A call that never returns (a step
    past its deadline, abandoned) would hold it forever: ``abandon`` hands the others a new one."""
    owner: int | None = None
    depth = 0

    def __init__(self) -> None:
        self.state: tuple[Any, Any] | None = None
        self.saved: list[tuple[Any, Any, threading.RLock]] = []

    @classmethod
    def abandon(cls, thread_id: int) -> None:
        """The thread ``thread_id`` was given up on (``lmgym.core.ABANDONED``): if it holds the
        lock, the other envs get a fresh one (its own release, if it ever comes, frees the old)."""
        if cls.owner == thread_id:
            cls.LOCK, cls.owner, cls.depth = threading.RLock(), None, 0

    def seed(self, seed: int) -> None:
        with self:
            random.seed(seed)
            np.random.seed(seed % 2**32)

    def __enter__(self) -> OwnRNG:
        lock = OwnRNG.LOCK
        lock.acquire()
        if lock is OwnRNG.LOCK:
            OwnRNG.owner, OwnRNG.depth = threading.get_ident(), OwnRNG.depth + 1
        self.saved.append((random.getstate(), np.random.get_state(), lock))
        if self.state is not None:
            random.setstate(self.state[0])
            np.random.set_state(self.state[1])
        return self

    def __exit__(self, *exc: Any) -> None:
        self.state = (random.getstate(), np.random.get_state())
        python, numpy, lock = self.saved.pop()
        random.setstate(python)
        np.random.set_state(numpy)
        if lock is OwnRNG.LOCK:  # else this thread was abandoned and the others hold a new lock
            OwnRNG.depth -= 1
            OwnRNG.owner = None if OwnRNG.depth == 0 else OwnRNG.owner
        lock.release()


ABANDONED.append(OwnRNG.abandon)


@contextmanager
def named_errors(what: str, action: str | None = None) -> Iterator[None]:
    """Re-raises whatever the wrapped library raises as ``LibraryError`` naming ``what`` (the env
    and task) and the action, if any."""
    try:
        yield
    except LibraryError:
        raise
    except Exception as e:
        on = f" on the action {action!r:.200}" if action is not None else ""
        raise LibraryError(f"{what} raised {type(e).__name__}{on}: {str(e)[:300]}") from e
