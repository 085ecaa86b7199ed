"""Answers that a task library's scorer would run as Python: read as data, or scored in a sandbox.

Nine reasoning-gym scorers hand the model's answer text to ``eval()`` or to sympy's
``parse_expr`` (which evals it): ``<answer>__import__('os').system(...)</answer>`` would run in
the process that steps the env (the trainer, a Ray actor), and an answer that walks
``gc.get_objects()`` could read the solution out of memory and earn reward without solving.
``9**9**9**9`` makes sympy compute while holding the GIL, where no thread deadline can stop it.
lmgym never lets that text run:

- ``LITERAL_TASKS`` (their scorers ``eval`` the answer to read a list or a board): the task's own
  scorer runs with ``eval`` bound to ``ast.literal_eval``, so the text is read as a Python literal
  (what a correct answer is) and never run; reading a literal of bounded text is bounded.
- ``SYMPY_TASKS`` (math expressions): the answer must first be an expression of numbers, the
  names ``allowed_names`` gives (single letters, the math functions, the names of the reference
  answer) and ``+ - * / **``, with no exponent that is itself a power or above ``MAX_EXPONENT``
  (``expression_problem``). One that is not gets what the scorer gives no answer (its floor) and
  ``info["refused"]`` saying why; one that is is scored by the task's own scorer in the Python
  tool's sandbox (``lmgym.tools.python``: a subprocess in its own process group with time, memory
  and process limits, an emptied environment, as ``nobody`` when the host is root), so a
  computation that never ends is killed at ``SCORE_TIMEOUT`` and scores the floor. The check is
  what keeps the score honest (no code can run to print one); the sandbox is what bounds the time.

It costs a sandboxed call (about 1.3 s of CPU on a 2-core machine: an interpreter, sympy and
reasoning-gym) per answer that passes the check, only on these five tasks.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

LITERAL_TASKS = frozenset({"n_queens", "binary_matrix", "spiral_matrix", "string_insertion"})
"""reasoning-gym tasks whose ``score_answer`` calls ``eval`` on the answer."""
SYMPY_TASKS = frozenset(
    {"countdown", "puzzle24", "polynomial_multiplication", "simple_integration", "intermediate_integration"}
)
"""reasoning-gym tasks whose ``score_answer`` calls sympy's ``parse_expr`` on the answer."""

MATH_FUNCTIONS = frozenset(
    [
        "sin",
        "cos",
        "tan",
        "cot",
        "sec",
        "csc",
        "asin",
        "acos",
        "atan",
        "acot",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "exp",
        "log",
        "ln",
        "sqrt",
        "Abs",
    ]
)
"""Functions a math answer may call."""
MAX_EXPONENT = 1000
SCORE_TIMEOUT = 10.0
"""Seconds a sandboxed scoring may take."""
SCORE_MEMORY_MB = 1024
_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))  # sandboxed scorings at once, per process

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd)
_IDENTIFIER = re.compile(r"[A-Za-z]+")


def literal_scorer(dataset: Any) -> Callable[..., float]:
    """``dataset.score_answer`` as written, except that ``eval`` in it is ``ast.literal_eval``.

    Example:
        >>> from reasoning_gym.factory import create_dataset
        >>> ds = create_dataset("string_insertion", seed=0, size=1)
        >>> score = literal_scorer(ds)
        >>> score(answer=str(list(ds[0]["answer"])), entry=ds[0]), score(answer="__import__('os')", entry=ds[0])
        (0.1, 0.0)
    """
    function = type(dataset).score_answer
    names = {**function.__globals__, "eval": ast.literal_eval}  # a copy: the library's module is untouched
    safe = types.FunctionType(function.__code__, names, function.__name__, function.__defaults__, function.__closure__)
    return types.MethodType(safe, dataset)


def allowed_names(reference: str = "") -> frozenset[str]:
    """Names a math answer may use: the math functions and the identifiers of ``reference`` (the
    task's own answer, say); single letters are always allowed."""
    return MATH_FUNCTIONS | frozenset(_IDENTIFIER.findall(reference))


def expression_problem(text: str, names: frozenset[str] = MATH_FUNCTIONS) -> str | None:
    """Why ``text`` is not a plain math expression (``None`` when it is): numbers, ``names``
    and single letters, ``+ - * / **``, parentheses and calls of ``names``, and no exponent that
    holds a power or a number above ``MAX_EXPONENT``.

    Example:
        >>> expression_problem("6*(98 - 54) - 34"), expression_problem("-5*X**9/3 + sin(x) + C")
        (None, None)
        >>> expression_problem("__import__('os')")
        'a call of __import__'
        >>> expression_problem("9**9**9**9"), expression_problem("x.real")
        ('an exponent that is a power', 'a Attribute node')
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "not a Python expression"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            if name not in names or node.keywords or not node.args:
                return f"a call of {name}"
            if any(isinstance(a, ast.Starred) for a in node.args):
                return "a starred argument"
        elif isinstance(node, ast.Name):
            if not (_IDENTIFIER.fullmatch(node.id) and (len(node.id) == 1 or node.id in names)):
                return f"the name {node.id[:40]}"
        elif isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                return f"a {type(node.value).__name__} constant"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = list(ast.walk(node.right))
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in exponent):
                return "an exponent that is a power"
            if any(isinstance(n, ast.Constant) and abs(cast(float, n.value)) > MAX_EXPONENT for n in exponent):
                return f"an exponent above {MAX_EXPONENT}"
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Load, *_OPERATORS)):
            return f"a {type(node).__name__} node"
    return None


SCORER = """
import json
from reasoning_gym.factory import create_dataset
task, config, entry, answers = json.loads({payload!r})
dataset = create_dataset(task, **config)
print(json.dumps([float(dataset.score_answer(answer=a, entry=entry)) for a in answers]))
"""


def sandboxed_scores(task: str, config: dict[str, Any], entry: dict[str, Any], answers: Sequence[str]) -> list[float]:
    """reasoning-gym's scores of ``answers`` for ``entry``, computed in the Python tool's sandbox
    by a dataset made there from ``config``; ``RuntimeError`` saying why when the sandbox did not
    give one score per answer (a timeout, an error)."""
    from lmgym.tools.python import PythonTool

    payload = json.dumps([task, {**config, "size": 1}, entry, list(answers)], default=str)
    tool = PythonTool(timeout=SCORE_TIMEOUT, memory_mb=SCORE_MEMORY_MB, pool_size=0)
    with _SLOTS:
        result = tool.run(SCORER.format(payload=payload))
    try:
        scores = json.loads(result.stdout.strip().splitlines()[-1])
        if result.returncode == 0 and len(scores) == len(answers) and all(type(s) is float for s in scores):
            return scores
    except (ValueError, IndexError):
        pass
    why = "timed out" if result.timed_out else (result.error or result.stderr.strip().splitlines()[-1:] or ["?"])[-1]
    raise RuntimeError(f"the sandboxed scorer gave no score ({str(why)[:200]})")


class SafeScorer:
    """A reasoning-gym dataset's ``score_answer`` that never runs the answer as code (module
    docs): read as a literal, or checked and scored in a sandbox, on the tasks whose scorers would
    run it; the dataset's own elsewhere. ``refused`` says why the last answer got ``floor``.

    Args:
        task: the reasoning-gym task's name.
        dataset: its dataset (``reasoning_gym.create_dataset(task, **config)``).
        config: the dataset's config, to make it again in the sandbox.

    Example:
        >>> from reasoning_gym.factory import create_dataset
        >>> ds = create_dataset("countdown", seed=0, size=1)
        >>> score = SafeScorer("countdown", ds, {"seed": 0})
        >>> score("__import__('os').system('true')", ds[0]), score.refused
        (0.01, 'the answer holds a call of Attribute, which a math answer does not')
    """

    def __init__(self, task: str, dataset: Any, config: dict[str, Any]):
        self.task, self.dataset, self.config = task, dataset, config
        self.refused: str | None = None

    def __call__(self, answer: str | None, entry: dict[str, Any]) -> float:
        return self.scores([answer], entry)[0] if answer is not None else self.floor(entry)

    def scores(self, answers: Sequence[str], entry: dict[str, Any]) -> list[float]:
        """The scores of ``answers`` (with one sandboxed call where the task needs one); what the
        scorer raises is raised."""
        self.refused = None
        if self.task in LITERAL_TASKS:
            score = literal_scorer(self.dataset)
            return [float(score(answer=a, entry=entry)) for a in answers]
        if self.task not in SYMPY_TASKS:
            return [float(self.dataset.score_answer(answer=a, entry=entry)) for a in answers]
        names = allowed_names(str(entry.get("answer", "")))
        problems = [expression_problem(a, names) for a in answers]
        safe = [a for a, problem in zip(answers, problems) if problem is None]
        if not safe:
            self.refused = f"the answer holds {problems[0]}, which a math answer does not"
            return [self.floor(entry)]
        try:
            return sandboxed_scores(self.task, self.config, entry, safe)
        except RuntimeError as e:
            self.refused = str(e)
            return [self.floor(entry)]

    def floor(self, entry: dict[str, Any]) -> float:
        """What the scorer gives no answer (countdown: 0.01), 0.0 if it raises on that too."""
        try:
            return float(self.dataset.score_answer(answer=None, entry=entry))
        except Exception:  # noqa: BLE001 (a scorer that cannot score None)
            return 0.0


__all__ = [
    "LITERAL_TASKS",
    "SafeScorer",
    "MATH_FUNCTIONS",
    "SYMPY_TASKS",
    "allowed_names",
    "expression_problem",
    "literal_scorer",
    "sandboxed_scores",
]
