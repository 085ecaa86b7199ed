"""Echo: repeat a short random word. A toy task, fast enough for learnability tests."""

from __future__ import annotations

import string
from typing import Any

from lmgym.core import LMEnv


class EchoEnv(LMEnv):
    """Repeat the word in the prompt.

    ## Description
    The prompt is ``"Echo: abc\\n"`` with a random word over the first ``alphabet_size`` lower-case
    letters; the model should write the word back. One turn.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=8)``.

    ## Observation Space
    ``AnyText``: the prompt on reset, ``""`` after the action.

    ## Starting State
    A word of ``length`` letters drawn from the env's RNG.

    ## Rewards
    Correct positions / max(len(action text), length): 1.0 for an exact echo, partial credit
    for each right letter, less for rambling on.

    ## Episode End
    Terminated after one action.

    ## Arguments
    ``gym.make("lmgym/Echo-v0", length=3, alphabet_size=4, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 8

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        length: int = 3,
        alphabet_size: int = 4,
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if not 1 <= alphabet_size <= 26 or length < 1:
            raise ValueError(f"need length >= 1 and 1 <= alphabet_size <= 26, got {length}, {alphabet_size}")
        self.length, self.alphabet = length, string.ascii_lowercase[:alphabet_size]
        self.word = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.word = "".join(self.np_random.choice(list(self.alphabet), size=self.length))
        return f"Echo: {self.word}\n", {"word": self.word}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        hits = sum(a == b for a, b in zip(text, self.word))
        reward = hits / max(len(text), self.length)
        return "", reward, True, False, {"correct": text == self.word}

    def oracle(self) -> str:
        return self.word
