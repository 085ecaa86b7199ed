"""Prompt-v0 and Pipeline-v0: your own tasks and reward functions, one or several model calls."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from lmgym.core import LMEnv, call_with_timeout, check_timeout

RewardFn = Callable[[str, Any, dict[str, Any]], float]

DEFAULT_TASKS = [
    {"prompt": f"Say hello to {name}.\n", "target": f"Hello, {name}!"}
    for name in ("Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "John")
]


def exact_match(prompt: str, completion: Any, info: dict[str, Any]) -> float:
    """The default reward: 1.0 when the (last) completion equals the task's ``target``."""
    last = completion[-1] if isinstance(completion, list) else completion
    return float(last.strip() == str(info.get("target", "")).strip())


class TaskSource:
    """Draws tasks from what a user passes as ``prompts``.

    A ``Sequence`` (list, HF ``datasets.Dataset``) is indexed with the env's RNG, so a seed
    picks the same task; a callable is called with the RNG (tasks made on the fly); any other
    iterable is consumed in order (not reproducible by seed: it has no random access).
    """

    def __init__(self, prompts: Any, prompt_key: str = "prompt"):
        if prompts is None or isinstance(prompts, (str, bytes)):
            raise TypeError(
                f"prompts must be a list, a dataset, an iterable or a function of the RNG, got {type(prompts).__name__}"
            )
        self.prompts, self.prompt_key = prompts, prompt_key
        self._iterator: Iterator[Any] | None = None
        if isinstance(prompts, Sequence) or hasattr(prompts, "__getitem__") and hasattr(prompts, "__len__"):
            if len(prompts) == 0:
                raise ValueError("prompts is empty")
        elif not callable(prompts):
            if not isinstance(prompts, Iterable):
                raise TypeError(f"prompts of type {type(prompts).__name__} is not iterable")
            self._iterator = iter(prompts)

    def draw(self, rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
        """A task as ``(prompt, other fields)``."""
        if self._iterator is not None:
            try:
                task = next(self._iterator)
            except StopIteration:
                raise RuntimeError("the prompts iterable is exhausted") from None
        elif callable(self.prompts) and not hasattr(self.prompts, "__getitem__"):
            task = self.prompts(rng)
        else:
            task = self.prompts[int(rng.integers(len(self.prompts)))]
        if isinstance(task, str):
            return task, {}
        if isinstance(task, dict) and self.prompt_key in task:
            fields = {k: v for k, v in task.items() if k != self.prompt_key}
            return str(task[self.prompt_key]), fields
        raise ValueError(f"a task is a string or a dict with a {self.prompt_key!r} key, got {task!r:.100}")


def call_reward(
    reward_fn: RewardFn, prompt: str, completion: Any, info: dict[str, Any], timeout: float | None = None
) -> float | None:
    """Calls the user's reward function. An exception is re-raised with the inputs that broke it;
    a result that is not a finite number raises ``ValueError`` naming them too. ``None`` when it
    has not returned after ``timeout`` seconds."""
    where = f"\n  prompt: {prompt!r:.300}\n  completion: {completion!r:.300}"
    try:
        done, reward = call_with_timeout(reward_fn, prompt, completion, info, timeout=timeout)
        if not done:
            return None
    except Exception as e:
        raise RuntimeError(f"reward_fn raised {type(e).__name__}: {e}{where}") from e
    if not isinstance(reward, numbers.Real) and hasattr(reward, "item"):
        try:
            reward = reward.item()  # a one-element array or tensor
        except (ValueError, RuntimeError):
            pass
    if not isinstance(reward, numbers.Real):
        raise ValueError(f"reward_fn returned {type(reward).__name__} {reward!r:.100}, not a number{where}")
    if not math.isfinite(reward):
        raise ValueError(f"reward_fn returned {reward}, not a finite number{where}")
    return float(reward)


class PromptEnv(LMEnv):
    """One model call per episode on your prompts, scored by your reward function.

    ## Description
    ``reset`` draws a task; the action is the completion; ``reward_fn(prompt, completion,
    info)`` scores it. A task is a string or a dict whose ``prompt`` (``prompt_key``) is the
    prompt and whose other fields (answers, test cases, dataset columns) reach ``reward_fn`` in
    ``info``. A reward model works too: ``lmgym.rewards.from_model(model, tokenizer)``.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=64)``.

    ## Observation Space
    ``AnyText``: the prompt, then ``""``.

    ## Starting State
    A task from ``prompts``: a list or HF dataset (indexed with the env's RNG), a function
    called with the RNG (tasks made on the fly), or any iterable (consumed in order).

    ## Rewards
    Whatever ``reward_fn`` returns; a reward function that raises stops the episode with an
    error naming the prompt and completion. Default: exact match with the task's ``target``.
    With ``reward_timeout``, a reward function that has not returned after that many seconds
    gives 0.0 and ``info["timeout"]`` says so.

    ## Episode End
    Terminated after one action.

    ## Arguments
    ``gym.make("lmgym/Prompt-v0", prompts=[...], reward_fn=fn, prompt_key="prompt",
    stop_strings=(), reward_timeout=None, max_observation_length=4096, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    def __init__(
        self,
        prompts: Any = None,
        reward_fn: RewardFn | None = None,
        tokenizer: Any = None,
        render_mode: str | None = None,
        prompt_key: str = "prompt",
        stop_strings: Sequence[str] = (),
        max_action_tokens: int | None = None,
        reward_timeout: float | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        self.reward_timeout = check_timeout("reward_timeout", reward_timeout)
        self.tasks = TaskSource(DEFAULT_TASKS if prompts is None else prompts, prompt_key)
        self.reward_fn = reward_fn or exact_match
        self.stop_strings = tuple(stop_strings)
        self.prompt, self.fields = "", dict[str, Any]()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.prompt, self.fields = self.tasks.draw(self.np_random)
        return self.prompt, dict(self.fields)

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.score(text, {"completion": text})

    def score(self, completion: Any, info: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The last step: ``reward_fn``'s reward (0.0 and ``info["timeout"]`` if it timed out)."""
        reward = call_reward(self.reward_fn, self.prompt, completion, dict(self.fields), self.reward_timeout)
        if reward is None:
            info["timeout"] = f"reward_fn did not return within {self.reward_timeout:g} s: reward 0.0"
        return "", reward or 0.0, True, False, info

    def oracle(self) -> str:
        """The task's ``target`` field, when it has one."""
        if "target" not in self.fields:
            raise NotImplementedError("this task has no 'target' field to act as the oracle")
        return str(self.fields["target"])


DEFAULT_PIPELINE = [
    {"prompt": f"Name a {kind}:", "oracle": [word, word[::-1]]}
    for kind, word in [("color", "red"), ("fruit", "apple"), ("animal", "horse"), ("tree", "oak"), ("metal", "iron")]
]


def reverse_request(output: str) -> str:
    """The default transform: ask the model to spell its own answer backwards."""
    return f"\nSpell {output.strip()!r} backwards:"


def reversed_correctly(prompt: str, outputs: list[str], info: dict[str, Any]) -> float:
    """The default pipeline reward: the second output is the first one reversed (non-empty)."""
    first, second = outputs[0].strip(), outputs[-1].strip()
    return float(bool(first) and second == first[::-1])


class PipelineEnv(PromptEnv):
    """Several model calls in one trajectory, rewarded at the end: trlx's open request.

    ## Description
    ``prompt_1 -> M -> F_1(out_1) = prompt_2 -> M -> ... -> R(prompt_1, [out_1, ..., out_n], info)``.
    Every model call is one ``step``; each transform ``F_i(out_i)`` returns the text the env adds
    next (the next prompt), and the reward comes after the last call, so an agent trains every
    call of the trajectory on it.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=64)``.

    ## Observation Space
    ``AnyText``: the first prompt, then each ``F_i(out_i)``, then ``""``.

    ## Starting State
    A task drawn as in ``Prompt-v0`` (list, dataset, function of the RNG, or iterable).

    ## Rewards
    0 for every call but the last; then ``reward_fn(prompt_1, outputs, info)``. Default: the
    second output spells the first one backwards. ``reward_timeout`` as in ``Prompt-v0``.

    ## Episode End
    Terminated after ``len(transforms) + 1`` calls; or at once, with reward 0.0 and
    ``info["timeout"]``, when a transform has not returned after ``transform_timeout`` seconds.

    ## Arguments
    ``gym.make("lmgym/Pipeline-v0", prompts=[...], transforms=[F_1, ...], reward_fn=R,
    reward_timeout=None, transform_timeout=None, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    def __init__(
        self,
        prompts: Any = None,
        transforms: Sequence[Callable[[str], str]] | None = None,
        reward_fn: RewardFn | None = None,
        transform_timeout: float | None = None,
        **kwargs: Any,
    ):
        super().__init__(DEFAULT_PIPELINE if prompts is None else prompts, reward_fn or reversed_correctly, **kwargs)
        self.transform_timeout = check_timeout("transform_timeout", transform_timeout)
        self.transforms = list(transforms) if transforms is not None else [reverse_request]
        self.outputs: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.outputs = []
        return super().reset(seed=seed, options=options)

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.outputs.append(text)
        call = len(self.outputs)
        if call <= len(self.transforms):
            obs = self.transform(call - 1, text)
            if obs is None:
                timeout = f"transforms[{call - 1}] did not return within {self.transform_timeout:g} s: reward 0.0"
                return "", 0.0, True, False, {"call": call, "timeout": timeout}
            return obs, 0.0, False, False, {"call": call}
        return self.score(list(self.outputs), {"call": call, "outputs": list(self.outputs)})

    def transform(self, index: int, text: str) -> str | None:
        """``transforms[index](text)``, or ``None`` after ``transform_timeout``; an exception is
        re-raised naming the index, prompt and input."""
        try:
            done, obs = call_with_timeout(self.transforms[index], text, timeout=self.transform_timeout)
            return str(obs) if done else None
        except Exception as e:
            raise RuntimeError(
                f"transforms[{index}] raised {type(e).__name__}: {e}\n  prompt: {self.prompt!r:.300}\n"
                f"  input: {text!r:.300}"
            ) from e

    def oracle(self) -> str:
        """The task's ``oracle`` field: a list with the good output of each call."""
        if "oracle" not in self.fields:
            raise NotImplementedError("this task has no 'oracle' field (a list of outputs, one per call)")
        outputs = self.fields["oracle"]
        return str(outputs[min(len(self.outputs), len(outputs) - 1)])
