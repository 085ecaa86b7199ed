"""PythonTool-v0: questions that need a little computation, answered after running Python."""

from __future__ import annotations

from typing import Any

from lmgym.core import LMEnv
from lmgym.envs.calculator import grade_answer
from lmgym.tools.python import PythonTool
from lmgym.wrappers.tool_use import ToolUse


def _primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[:2] = b"\x00\x00"[:n]
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return sum(sieve)


def _divisors(n: int) -> int:
    return sum(1 for d in range(1, n + 1) if n % d == 0)


# kind -> (question, python code that prints the answer, answer) from numbers a, b and e = a // 10
TASKS = {
    "primes": (
        "How many primes are there below {a}?",
        "print(sum(all(n % d for d in range(2, int(n**0.5) + 1)) for n in range(2, {a})))",
        lambda a, b: _primes_below(a),
    ),
    "digit_sum": (
        "What is the sum of the digits of {b}**{e}?",
        "print(sum(map(int, str({b}**{e}))))",
        lambda a, b: sum(map(int, str(b ** (a // 10)))),
    ),
    "divisors": (
        "How many divisors does {a} have?",
        "print(sum({a} % d == 0 for d in range(1, {a} + 1)))",
        lambda a, b: _divisors(a),
    ),
}


class PythonTaskEnv(LMEnv):
    """Answer a question that takes a little computation (primes, digit sums, divisors).

    ## Description
    One seeded question per episode. Alone, the env only takes answers; ``lmgym/PythonTool-v0``
    wraps it in ``ToolUse`` with the sandboxed Python tool (``<python>code</python>``).

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=128)``.

    ## Observation Space
    ``AnyText``: the question, then feedback or tool results.

    ## Starting State
    A kind of question and its numbers (``a`` in [100, ``max_n``], ``b`` in [2, 9], exponents
    ``a // 10``), drawn from the env's RNG.

    ## Rewards
    ``<answer>N</answer>``: 1.0 if right, else 0.0. Anything else: 0.0 and feedback.

    ## Episode End
    Terminated by an answer; truncated by the ``TimeLimit`` of the registered id (4 turns).

    ## Arguments
    ``gym.make("lmgym/PythonTool-v0", max_n=5000, timeout=10.0, isolation="auto", pool_size=1, tokenizer=None)``

    ## Version History
    - v0: first version.
    """

    stop_strings = ("</answer>",)
    special_tokens = ("<answer>", "</answer>")
    max_action_tokens = 128  # the oracle's longest call is 98 byte tokens

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_n: int = 5000,
        max_action_tokens: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens)
        if max_n < 100:
            raise ValueError(f"max_n must be >= 100, got {max_n}")
        self.max_n = max_n
        self.kind, self.a, self.b, self.answer = "primes", 100, 2, 25

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.kind = str(self.np_random.choice(sorted(TASKS)))
        self.a = int(self.np_random.integers(100, self.max_n + 1))
        self.b = int(self.np_random.integers(2, 10))
        question, _, solve = TASKS[self.kind]
        self.answer = solve(self.a, self.b)
        return question.format(a=self.a, b=self.b, e=self.a // 10) + "\n", {"kind": self.kind}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return grade_answer(text, self.answer)

    def oracle(self) -> str:
        return f"<answer>{self.answer}</answer>"

    def oracle_tool_call(self) -> str:
        return "<python>" + TASKS[self.kind][1].format(a=self.a, b=self.b, e=self.a // 10) + "</python>"


def make_python_tool_env(timeout: float = 10.0, isolation: str = "auto", pool_size: int = 1, **kwargs: Any) -> ToolUse:
    """``lmgym/PythonTool-v0``: ``PythonTaskEnv`` with the sandboxed Python tool (``isolation``:
    ``"auto"``, ``"bwrap"`` or ``"rlimits"``; ``pool_size``: sandboxes kept waiting for the next
    call; see ``lmgym.tools.python``)."""
    return ToolUse(PythonTaskEnv(**kwargs), [PythonTool(timeout=timeout, isolation=isolation, pool_size=pool_size)])
