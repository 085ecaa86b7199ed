"""An env that fails on purpose, for tests/vector/test_faults.py: Echo-v0 whose reset or step hangs,
raises or returns the wrong types on chosen seeds. Importable by a subprocess too
(``lmgym train faulty_env:faulty/Faulty-v0`` with ``tests/`` on ``PYTHONPATH``)."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym

from lmgym.compat import OwnRNG
from lmgym.envs.echo import EchoEnv

NEVER = threading.Event()  # never set: a call that waits on it hangs for good
RESETS = [0]  # resets in this process, every env together
MADE = [0]  # envs made in this process
HUNG_ONCE: list[int] = []


class FaultyEnv(EchoEnv):
    """Echo-v0, but on a reset with a seed in ``seeds`` (after ``after_resets`` resets in this
    process; ``seeds=None``: on every seed) it fails as ``fault`` says (``none``: it does not):

    - ``hang``: the step never returns; ``hang_in_rng``: the same, inside ``OwnRNG``'s lock;
    - ``raise``: the step raises; ``types``: the step returns ``(12345, "notafloat", None, None, None)``;
    - ``reset_raise``: the reset raises; ``reset_hang``: it never returns; ``reset_hang_once``: the
      first such reset in the process never returns, later ones do;
    - ``exit``, ``interrupt``, ``generator_exit``: the step raises ``SystemExit(0)``,
      ``KeyboardInterrupt`` or ``GeneratorExit``;
    - ``mutate``: the step writes over the action array it was given (then plays on);
    - ``close_hang``: ``close()`` never returns (on any seed).

    ``make_hang_after=N``: making the env hangs once N envs were made in this process (a
    factory that hangs when the guard makes a fresh env).
    """

    def __init__(
        self,
        fault: str = "raise",
        seeds: tuple[int, ...] | None = (1,),
        after_resets: int = 0,
        make_hang_after: int | None = None,
        **kwargs: Any,
    ):
        MADE[0] += 1
        if make_hang_after is not None and MADE[0] > make_hang_after:
            NEVER.wait()
        super().__init__(**kwargs)
        self.fault, self.seeds, self.after_resets = fault, None if seeds is None else set(seeds), after_resets
        self.faulty = False
        self.rng = OwnRNG()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        RESETS[0] += 1
        self.faulty = (self.seeds is None or seed in self.seeds) and RESETS[0] > self.after_resets
        with self.rng:  # every env takes the shared lock, as the task-library adapters do
            pass
        if self.faulty and self.fault == "reset_raise":
            raise KeyError(f"no task for seed {seed}")
        if self.faulty and (self.fault == "reset_hang" or self.fault == "reset_hang_once" and not HUNG_ONCE):
            HUNG_ONCE.append(1)
            NEVER.wait()
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        if self.faulty and self.fault == "hang":
            NEVER.wait()
        if self.faulty and self.fault == "hang_in_rng":
            with self.rng:
                NEVER.wait()
        if self.faulty and self.fault == "raise":
            raise ZeroDivisionError("the reward function divided by zero")
        if self.faulty and self.fault == "types":
            return 12345, "notafloat", None, None, None
        if self.faulty and self.fault in ("exit", "interrupt", "generator_exit"):
            raise {"exit": SystemExit(0), "interrupt": KeyboardInterrupt(), "generator_exit": GeneratorExit()}[
                self.fault
            ]
        if self.faulty and self.fault == "mutate":
            result = super().step(action)
            action[:] = 0
            return result
        return super().step(action)

    def close(self) -> None:
        if self.fault == "close_hang":
            NEVER.wait()
        super().close()


gym.register("faulty/Faulty-v0", entry_point=FaultyEnv, max_episode_steps=1)


class NeverEnv(EchoEnv):
    """Echo-v0 that never rewards: RL has nothing to learn from."""

    def step_text(self, text: str) -> Any:
        obs, _, terminated, truncated, info = super().step_text(text)
        return obs, 0.0, terminated, truncated, {**info, "correct": False}


class BudgetAsEndEnv(EchoEnv):
    """Echo-v0 that takes three turns and says ``terminated`` when its third runs out: a budget
    reported as the end of the game (registered with the same turn limit)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.turns = 0
        return super().reset(seed=seed, options=options)

    def step_text(self, text: str) -> Any:
        self.turns += 1
        return "again\n", 0.0, self.turns >= 3, False, {}


gym.register("faulty/Never-v0", entry_point=NeverEnv, max_episode_steps=1)
gym.register("faulty/BudgetAsEnd-v0", entry_point=BudgetAsEndEnv, max_episode_steps=3)
