"""GuessNumber-v0: find a hidden integer with higher/lower feedback."""

from __future__ import annotations

import re
from typing import Any

from lmgym.core import LMEnv

INTEGER = re.compile(r"-?\d{1,30}")  # longer digit runs are not a guess (and int() refuses > 4300 digits)


class GuessNumberEnv(LMEnv):
    """Guess the hidden integer; each wrong guess is answered with "higher" or "lower".

    ## Description
    The prompt states the range; each action should contain a number (the first integer in the
    text is the guess). Bisection finds it in ``ceil(log2(high - low + 1))`` guesses.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=8)``.

    ## Observation Space
    ``AnyText``: the prompt, then ``"higher\\n"``, ``"lower\\n"`` or a reminder of the format.

    ## Starting State
    A hidden integer uniform in ``[low, high]``, drawn from the env's RNG.

    ## Rewards
    Finding it: ``1 - 0.05 * (guesses - 1)`` (fewer turns better); every other turn 0.

    ## Episode End
    Terminated when found; truncated by the ``TimeLimit`` of the registered id (10 turns).

    ## Arguments
    ``gym.make("lmgym/GuessNumber-v0", low=1, high=100, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 8

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        low: int = 1,
        high: int = 100,
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if low >= high:
            raise ValueError(f"need low < high, got {low}, {high}")
        self.low, self.high = low, high
        self.secret = self.lo = self.hi = self.guesses = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(self.low, self.high + 1))
        self.lo, self.hi, self.guesses = self.low, self.high, 0
        return f"Guess my number between {self.low} and {self.high}.\n", {}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        found = INTEGER.search(text)
        if found is None:
            return (
                f"Guess a number between {self.low} and {self.high}.\n",
                0.0,
                False,
                False,
                {},
            )  # no "guess": a vector env keeps ints
        guess = int(found.group())
        self.guesses += 1
        if guess == self.secret:
            reward = max(0.0, 1.0 - 0.05 * (self.guesses - 1))
            return "correct\n", reward, True, False, {"guess": guess, "correct": True}
        if guess < self.secret:
            self.lo = max(self.lo, guess + 1)
            return "higher\n", 0.0, False, False, {"guess": guess}
        self.hi = min(self.hi, guess - 1)
        return "lower\n", 0.0, False, False, {"guess": guess}

    def oracle(self) -> str:
        """Bisection over the range the feedback so far allows."""
        return str((self.lo + self.hi) // 2)
