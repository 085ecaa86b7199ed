"""GEM-v0: GEM's envs (``gem-llm``) as lmgym envs (``pip install 'lmgym[gem]'``).

GEM envs are Gymnasium-like already, with strings for actions; the adapter adds the token-action
contract, the tokenizer and a seeded stream of their own for the global RNG GEM draws from.
``lmgym.compat.gem.make("game:GuessTheNumber-v0-easy")`` is ``gym.make("lmgym/GEM-v0",
env_id="game:GuessTheNumber-v0-easy")``.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from lmgym.compat import LibraryError, check_name, named_errors, require
from lmgym.compat.library import LibraryEnv, bisection

NEEDS = {
    "math:": "the network, to download its dataset from the Hugging Face Hub",
    "qa:": "the network, to download its dataset from the Hugging Face Hub",
    "code:": "the network, to download its dataset from the Hugging Face Hub",
    "eval:": "the network, to download its dataset from the Hugging Face Hub",
    "terminal:": "Docker, to run its terminal",
}
"""What GEM envs outside the games need at run time, by id prefix (this machine has neither)."""
PARSES = "grades answers with sympy's parse_expr, which runs the model's text as Python in this process"
RUNS_ANSWERS = {
    "gem.envs.math_env": PARSES,
    "gem.envs.math_visual_env": PARSES,
    "gem.envs.code_env": "runs the model's code with GEM's own runner (unsandboxed by default), not lmgym's sandbox",
}
"""GEM env modules lmgym refuses to make, and why (reasoning-gym's math tasks are scored safely in
``lmgym/ReasoningGym-v0``; code runs sandboxed in ``lmgym/PythonTool-v0`` or with ``--tools python``)."""
HINT = re.compile(r"target number is (higher|lower) than (\d+)")


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make("lmgym/GEM-v0", env_id=env_id, **kwargs)``: a GEM env with lmgym's contract."""
    return gym.make("lmgym/GEM-v0", env_id=env_id, **kwargs)


def check_kwargs(env_id: str, entry_point: Any, kwargs: dict[str, Any]) -> None:
    """``ValueError`` naming an ``env_kwargs`` key that no ``__init__`` of the GEM env's class
    (and its bases) names: GEM's games swallow unknown keywords (``**_``) without a word."""
    import inspect

    with named_errors(f"GEM env {env_id!r}"):
        creator = gym.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
        classes = inspect.getmro(creator) if inspect.isclass(creator) else (creator,)
        named = {
            name
            for c in classes
            for name, p in inspect.signature(getattr(c, "__init__", c)).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self"
        }
    unknown = sorted(set(kwargs) - named)
    if unknown:
        takes = ", ".join(sorted(named)) or "none"
        raise ValueError(f"GEM env {env_id!r} takes no env_kwargs {unknown[0]!r}; it takes: {takes}")


class GEMEnv(LibraryEnv):
    """A GEM env (``gem-llm``): its text in, the model's text out, its rewards.

    ## Description
    ``gem.make(env_id)`` builds the env once; ``reset(seed=s)`` resets it with a seed drawn from
    the lmgym env's RNG (so ``reset(seed=s)`` reproduces the episode, and GEM's draws from the
    global ``random`` are this env's own stream). Each step passes the decoded action to GEM's
    ``step`` and returns its observation with GEM's ``suffix`` (the next instruction) after it.
    GEM games read the action inside ``\\boxed{...}``: the default stop string is ``}``.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=48)``.

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: GEM's instructions, then each observation.

    ## Starting State
    GEM's ``reset``, seeded as above.

    ## Rewards
    GEM's rewards (``info["correct"]`` when an episode ends on GEM's success reward, 1.0).

    ## Episode End
    When GEM says so (``terminated``/``truncated``), or the registered limit of 200 steps.

    ## Arguments
    ``gym.make("lmgym/GEM-v0", env_id="game:GuessTheNumber-v0-easy", stop_strings=("}",),
    env_kwargs={}, tokenizer=None)``. Ids of datasets (``math:``, ``qa:``, ``code:``, ``eval:``)
    and of terminals (``terminal:``) say in one line what they need.

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 48
    max_observation_length = 16384
    special_tokens = ("\\boxed{",)

    def __init__(
        self,
        env_id: str = "game:GuessTheNumber-v0-easy",
        stop_strings: tuple[str, ...] | list[str] = ("}",),
        env_kwargs: dict[str, Any] | None = None,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        require("gem", "gem")
        registry = require("gem.envs.registration", "gem").ENV_REGISTRY
        check_name("GEM env", env_id, list(registry), "gem")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.stop_strings = tuple(stop_strings)
        self.what = f"GEM env {env_id!r}"
        need = next((what for prefix, what in NEEDS.items() if env_id.startswith(prefix)), None)
        module = str(registry[env_id].entry_point).partition(":")[0]
        if module in RUNS_ANSWERS:
            raise LibraryError(f"GEM env {env_id!r} {RUNS_ANSWERS[module]}: lmgym does not make it")
        try:
            if self.env_kwargs:
                check_kwargs(env_id, registry[env_id].entry_point, self.env_kwargs)
            with self.call():
                self.gem = require("gem", "gem").make(env_id, **self.env_kwargs)
                safe_reasoning_gym_scorer(self.gem)
        except LibraryError as e:
            if need is None:
                raise
            raise LibraryError(f"GEM env {env_id!r} needs {need}, and making it failed: {e.__cause__!s:.200}") from e
        self.hints: list[tuple[str, int]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        inner_seed = self.library_seed()
        with self.call("reset"):
            obs, info = self.gem.reset(seed=inner_seed)
        self.hints = []
        return f"{obs}\n", self.plain_info(info)

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self.call(action=text):
            obs, reward, terminated, truncated, info = self.gem.step(text)
        self.hints += [(h, int(n)) for h, n in HINT.findall(str(obs))]
        done = bool(terminated or truncated)
        suffix = info.get("suffix") if isinstance(info, dict) and not done else None
        out = f"{obs}\n{suffix}\n" if suffix else f"{obs}\n"
        info = {**self.plain_info(info), "correct": done and float(reward) >= 1.0}
        return out, float(reward), bool(terminated), bool(truncated) and not terminated, info

    def oracle(self) -> str:
        """For GuessTheNumber: bisection over the hints so far (GEM envs have no oracle of their own)."""
        if type(self.gem).__name__ != "GuessTheNumberEnv":
            raise NotImplementedError(f"GEM env {self.env_id!r} has no oracle in lmgym")
        return f"\\boxed{{{bisection(self.gem.min_number, self.gem.max_number, self.hints)}}}"


def safe_reasoning_gym_scorer(env: Any) -> None:
    """A GEM ``rg:`` env (reasoning-gym inside GEM) scores with ``SafeScorer``, which never runs the
    answer as code, instead of the dataset's own ``score_answer`` (nine of them would)."""
    inner = getattr(env, "unwrapped", env)
    if type(inner).__module__ == "gem.envs.reasoning_gym":
        from lmgym.compat.code_answers import SafeScorer

        config = {"seed": inner.seed, "size": inner.size}
        inner.reward_fn = SafeScorer(inner.name, inner.ds, config)


__all__ = ["GEMEnv", "make"]
