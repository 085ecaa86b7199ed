"""Arithmetic questions, and Calculator-v0: the same questions with a calculator tool."""

from __future__ import annotations

import re
from typing import Any

from lmgym.core import LMEnv
from lmgym.tools.calculator import Calculator, evaluate, format_number
from lmgym.wrappers.tool_use import ToolUse

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")
FEEDBACK = "\nAnswer with <answer>N</answer>.\n"


def grade_answer(text: str, answer: int | float) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """The step of a question answered with ``<answer>N</answer>``: 1.0 and terminated when N is
    right, 0.0 and terminated when wrong, feedback and no reward when there is no answer tag."""
    found = ANSWER.search(text)
    if found is None:
        return FEEDBACK, 0.0, False, False, {"answer": None, "expected": answer}
    number = NUMBER.fullmatch(found.group(1))
    correct = number is not None and float(number.group(1)) == answer
    return "", float(correct), True, False, {"answer": found.group(1), "correct": correct, "expected": answer}


RESULT = re.compile(r"<result>(.*?)</result>", re.DOTALL)


def outcome(info: dict[str, Any], tool_results: list[str]) -> str:
    """What the episode's latest step amounts to: ``"correct"``, ``"malformed"`` (no answer, or
    not a number), ``"no tool"`` (answered wrongly without calling the tool), ``"operand copy"``
    (the tool never returned the answer: the question was copied wrongly into the call) or
    ``"result copy"`` (the tool returned the answer and the model answered something else).

    Example:
        >>> outcome({"answer": "13", "correct": False, "expected": 12}, ["12"])
        'result copy'
    """
    if info.get("correct"):
        return "correct"
    if info.get("answer") is None or NUMBER.fullmatch(str(info["answer"])) is None:
        return "malformed"
    if not tool_results:
        return "no tool"
    return "result copy" if format_number(info["expected"]) in tool_results else "operand copy"


class ArithmeticEnv(LMEnv):
    """Answer a seeded arithmetic question such as ``What is 37 * 412?``.

    ## Description
    One question, two operands and one operator. Alone, the env only takes answers; wrapped
    in ``ToolUse`` with a calculator (``lmgym/Calculator-v0``) the model may compute first.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=32)``: the token ids of the model's text.

    ## Observation Space
    ``AnyText``: the question on reset; feedback text after an action without an answer.

    ## Starting State
    Operands with ``min_digits`` to ``max_digits`` digits and an operator from ``operators``,
    drawn from the env's RNG. ``/`` questions are built to divide exactly.

    ## Rewards
    ``<answer>N</answer>``: 1.0 if N equals the result, else 0.0. Any other text: 0.0. Each
    step's ``info["outcome"]`` classifies it: correct, malformed, no tool, operand copy (the
    tool never returned the answer) or result copy (it did, and the answer differs).

    ## Episode End
    Terminated by an answer; truncated by the ``TimeLimit`` of the registered id.

    ## Arguments
    ``gym.make("lmgym/Calculator-v0", min_digits=2, max_digits=3, operators="+-*",
    tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    stop_strings = ("</answer>",)
    special_tokens = ("<answer>", "</answer>")
    max_action_tokens = 32

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        min_digits: int = 2,
        max_digits: int = 3,
        operators: str = "+-*",
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if not 1 <= min_digits <= max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {min_digits}, {max_digits}")
        if not operators or set(operators) - set("+-*/"):
            raise ValueError(f"operators must be drawn from '+-*/', got {operators!r}")
        self.min_digits, self.max_digits, self.operators = min_digits, max_digits, operators
        self.expression = ""
        self.answer: int | float = 0
        self.calc_sums = False

    def _operand(self) -> int:
        digits = int(self.np_random.integers(self.min_digits, self.max_digits + 1))
        return int(self.np_random.integers(10 ** (digits - 1), 10**digits))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        op = str(self.np_random.choice(list(self.operators)))
        a, b = self._operand(), self._operand()
        if op == "/":
            a = a * b
        self.expression = f"{a} {op} {b}"
        self.answer = evaluate(self.expression)
        self.calc_sums = bool(self.np_random.random() < 0.25)  # see oracle_tool_call
        return f"What is {self.expression}?\n", {"expression": self.expression}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = grade_answer(text, self.answer)
        results = [m.group(1) for o in self.transcript[2::2] for m in RESULT.finditer(o)]  # tool turns so far
        info["outcome"] = outcome(info, results)  # lmgym train logs the mix of the last steps'
        return obs, reward, terminated, truncated, info

    def oracle(self) -> str:
        return f"<answer>{format_number(self.answer)}</answer>"

    def oracle_tool_call(self) -> str | None:
        """The calculator call the oracle makes first: always for ``*`` and ``/``, and for a
        quarter of the ``+`` and ``-`` questions (the rest it does in its head). Demonstrations
        from the oracle thus call the tool part of the time, the way people do."""
        if self.expression.split()[1] in "+-" and not self.calc_sums:
            return None
        return f"<calc>{self.expression.replace(' ', '')}</calc>"


def make_calculator_env(**kwargs: Any) -> ToolUse:
    """``lmgym/Calculator-v0``: ``ArithmeticEnv`` with a calculator tool (``<calc>...</calc>``)."""
    return ToolUse(ArithmeticEnv(**kwargs), [Calculator()])
