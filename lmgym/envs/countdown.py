"""Countdown-v0: reach a target with the given numbers and + - * /."""

from __future__ import annotations

import ast
import re
from collections import Counter
from typing import Any

from lmgym.core import LMEnv
from lmgym.tools.calculator import CalculatorError, evaluate

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
SMALL = list(range(1, 11))
LARGE = [25, 50, 75, 100]


def _numbers_in(expression: str) -> list[Any]:
    tree = ast.parse(expression, mode="eval")
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


class CountdownEnv(LMEnv):
    """Write an expression that reaches the target, using each given number at most once.

    ## Description
    The prompt gives ``count`` numbers and a target built from some of them, so it is always
    reachable. Answer with ``<answer>EXPR</answer>``, EXPR using + - * / and parentheses.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=48)``.

    ## Observation Space
    ``AnyText``: the puzzle, then feedback when the text has no answer.

    ## Starting State
    Numbers drawn from 1-10 and 25/50/75/100, and a target from a random expression over
    some of them with a whole, positive value; all from the env's RNG.

    ## Rewards
    1.0 if EXPR evaluates exactly to the target and uses only the given numbers (each at most as
    often as given); else 0.0.

    ## Episode End
    Terminated by an answer; truncated by the ``TimeLimit`` of the registered id (2 turns).

    ## Arguments
    ``gym.make("lmgym/Countdown-v0", count=4, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    stop_strings = ("</answer>",)
    special_tokens = ("<answer>", "</answer>")
    max_action_tokens = 48

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        count: int = 4,
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if not 2 <= count <= 6:
            raise ValueError(f"count must be in [2, 6], got {count}")
        self.count = count
        self.numbers: list[int] = []
        self.target, self.solution = 0, ""

    def _puzzle(self) -> tuple[list[int], str, int]:
        while True:
            numbers = [int(x) for x in self.np_random.choice(SMALL + LARGE, size=self.count)]
            used = [
                int(i)
                for i in self.np_random.permutation(self.count)[: int(self.np_random.integers(2, self.count + 1))]
            ]
            expression = str(numbers[used[0]])
            for i in used[1:]:
                op = str(self.np_random.choice(list("+-*/")))
                candidate = f"({expression}) {op} {numbers[i]}" if op in "*/" else f"{expression} {op} {numbers[i]}"
                value = evaluate(candidate)
                if isinstance(value, int) and 0 < value < 10_000:
                    expression = candidate
            value = evaluate(expression)
            if isinstance(value, int) and value > 0 and expression != str(numbers[used[0]]):
                return numbers, expression, value

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.numbers, self.solution, self.target = self._puzzle()
        given = " ".join(map(str, self.numbers))
        return f"Numbers: {given}. Target: {self.target}.\n", {"numbers": list(self.numbers), "target": self.target}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        found = ANSWER.search(text)
        if found is None:
            return "\nAnswer with <answer>EXPR</answer>.\n", 0.0, False, False, {"answer": None}
        expression = found.group(1).strip()
        try:
            value = evaluate(expression)
            used = _numbers_in(expression)
            allowed = all(type(n) is int for n in used) and not Counter(used) - Counter(self.numbers)
        except (CalculatorError, SyntaxError, ValueError):
            value, allowed = None, False
        correct = allowed and value == self.target
        return "", float(correct), True, False, {"answer": expression, "correct": correct}

    def oracle(self) -> str:
        return f"<answer>{self.solution}</answer>"
