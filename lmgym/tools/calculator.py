"""A safe calculator: evaluates the AST of an arithmetic expression, never ``eval``.

Numbers, unary ``+ -``, binary ``+ - * / // % **`` and parentheses. Sizes are bounded before
any big operation runs, so ``9**9**9`` or a 10,000-digit product is refused at once instead of
hanging the process or eating its memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from fractions import Fraction

MAX_EXPRESSION_CHARS = 256
MAX_RESULT_BITS = 3400  # about 1,000 decimal digits
MAX_EXPONENT = 10_000

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Fraction], Fraction]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """An expression the calculator refuses, with the reason as its message."""


def _bits(x: Fraction) -> int:
    return max(x.numerator.bit_length(), x.denominator.bit_length())


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError("only whole-number exponents are supported")
    e = exponent.numerator
    if abs(e) > MAX_EXPONENT or _bits(base) * abs(e) > MAX_RESULT_BITS:
        raise CalculatorError("result too large")
    if base == 0 and e < 0:
        raise CalculatorError("division by zero")
    return base**e


def _check_size(x: Fraction) -> Fraction:
    if _bits(x) > MAX_RESULT_BITS:
        raise CalculatorError("result too large")
    return x


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise CalculatorError("numbers must be finite")
        return _check_size(Fraction(node.value))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, ast.Mult) and _bits(left) + _bits(right) > MAX_RESULT_BITS:
            raise CalculatorError("result too large")
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise CalculatorError("division by zero")
        return _check_size(Fraction(_BINARY[type(node.op)](left, right)))
    if isinstance(node, ast.Name):
        raise CalculatorError(f"names are not allowed: {node.id}")
    if isinstance(node, ast.Attribute):
        raise CalculatorError("attribute access is not allowed")
    if isinstance(node, ast.Call):
        raise CalculatorError("function calls are not allowed")
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression: an ``int`` when it is whole, else a ``float``.

    Raises:
        CalculatorError: the expression is not plain arithmetic, or its result is too large.

    Example:
        >>> evaluate("37*412")
        15244
        >>> evaluate("(2 + 3) / 4")
        1.25
        >>> evaluate("9**9**9")
        Traceback (most recent call last):
        ...
        lmgym.tools.calculator.CalculatorError: result too large
        >>> evaluate("2**1700/3")
        Traceback (most recent call last):
        ...
        lmgym.tools.calculator.CalculatorError: result too large
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CalculatorError("invalid expression") from e
    try:
        value = _evaluate(tree)
        return value.numerator if value.denominator == 1 else float(value)
    except CalculatorError:
        raise
    except OverflowError as e:  # a quotient too large for a float: 2**1700/3
        raise CalculatorError("result too large") from e
    except (ArithmeticError, ValueError, RecursionError, MemoryError) as e:  # whatever else: still an answer
        raise CalculatorError(f"cannot compute this ({type(e).__name__})") from e


def format_number(value: int | float) -> str:
    """``int`` as is; ``float`` rounded to 10 significant digits (``1.25``, ``0.3333333333``)."""
    return str(value) if isinstance(value, int) else f"{value:.10g}"


class Calculator:
    """The calculator as a tool: text in, result text out (``"error: ..."`` on bad input).

    Example:
        >>> Calculator()("2**10")
        '1024'
        >>> Calculator()("__import__('os')")
        'error: function calls are not allowed'
    """

    name = "calc"
    description = (
        "a calculator: write <calc>EXPRESSION</calc> (numbers, + - * / // % ** and parentheses) "
        "and its value comes back as <result>VALUE</result>"
    )

    def __call__(self, expression: str) -> str:
        try:
            return format_number(evaluate(expression))
        except CalculatorError as e:
            return f"error: {e}"
