"""Wordle-v0: guess a five-letter word with per-letter feedback."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Any

from lmgym.core import LMEnv

WORD = re.compile(r"[a-z]{5}")


@cache
def word_list() -> tuple[str, ...]:
    """The shipped list of five-letter words (``lmgym/envs/data/words.txt``)."""
    return tuple(files("lmgym.envs").joinpath("data/words.txt").read_text().split())


def feedback(guess: str, secret: str) -> str:
    """Per letter: ``G`` right place, ``Y`` in the word elsewhere, ``.`` not (Wordle's rules for
    repeated letters: each secret letter is matched once, greens first).

    Example:
        >>> feedback("eerie", "there")
        'Y.Y.G'
    """
    result = ["."] * 5
    unmatched = [s for g, s in zip(guess, secret) if g != s]
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            result[i] = "G"
    for i, g in enumerate(guess):
        if result[i] != "G" and g in unmatched:
            result[i] = "Y"
            unmatched.remove(g)
    return "".join(result)


class WordleEnv(LMEnv):
    """Find the secret five-letter word in six guesses.

    ## Description
    Each action's first five-letter lower-case word from the word list is the guess; the env
    answers ``guess: feedback`` with ``G`` (right place), ``Y`` (elsewhere in the word) or ``.``.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=8)``.

    ## Observation Space
    ``AnyText``: the rules, then one feedback line per guess.

    ## Starting State
    A secret word drawn from the shipped list (472 words) with the env's RNG.

    ## Rewards
    Finding the word: ``1 - 0.1 * (guesses - 1)``; else 0.

    ## Episode End
    Terminated when found; truncated by the ``TimeLimit`` of the registered id (6 guesses).

    ## Arguments
    ``gym.make("lmgym/Wordle-v0", tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 8

    def __init__(self, tokenizer: Any = None, render_mode: str | None = None, max_action_tokens: int | None = None):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        self.words = word_list()
        self.secret = self.words[0]
        self.history: list[tuple[str, str]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.secret = str(self.np_random.choice(self.words))
        self.history = []
        return "Guess the five-letter word. Feedback: G right place, Y elsewhere, . absent.\n", {}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        guess = next((w for w in WORD.findall(text.lower()) if w in self.words), None)
        if guess is None:
            return "Guess a five-letter word from the list.\n", 0.0, False, False, {"guess": None}
        marks = feedback(guess, self.secret)
        self.history.append((guess, marks))
        if guess == self.secret:
            reward = max(0.0, 1.0 - 0.1 * (len(self.history) - 1))
            return f"{guess}: {marks}\n", reward, True, False, {"guess": guess, "correct": True}
        return f"{guess}: {marks}\n", 0.0, False, False, {"guess": guess}

    def oracle(self) -> str:
        """The first word consistent with all feedback so far; on the sixth guess, the secret
        (which is always consistent). Solves every word within the six guesses."""
        if len(self.history) >= 5:
            return self.secret
        return next(w for w in self.words if all(feedback(g, w) == m for g, m in self.history))
