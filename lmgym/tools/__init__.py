"""Tools an env can offer the model: text in, text out.

A tool is any callable ``tool(text) -> str`` with a ``name`` (the tag the model writes, as in
``<calc>2+2</calc>``). ``lmgym.wrappers.ToolUse`` gives any env a set of tools: ``Calculator``
(an AST-evaluated, bounded arithmetic expression) and ``PythonTool`` (model-written code in a
sandboxed subprocess, ``lmgym.tools.python``).
"""

from collections.abc import Sequence
from typing import Any

from lmgym.tools.calculator import Calculator, CalculatorError, evaluate
from lmgym.tools.python import PythonResult, PythonTool

TOOLS: dict[str, Any] = {"calc": Calculator, "python": PythonTool}
"""The tools ``make_tools`` (and ``lmgym train --tools``) know, by their tag name."""


def make_tools(names: str | Sequence[str]) -> list[Any]:
    """Tools by name, as ``--tools calc,python`` lists them.

    Example:
        >>> [tool.name for tool in make_tools("calc")]
        ['calc']
        >>> make_tools("calc,abacus")
        Traceback (most recent call last):
        ...
        ValueError: unknown tool 'abacus': the tools are calc, python
    """
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    for name in names:
        if name not in TOOLS:
            raise ValueError(f"unknown tool {name!r}: the tools are {', '.join(TOOLS)}")
    if not names or len(set(names)) != len(names):
        raise ValueError(f"tools must name each tool once, got {names}")
    return [TOOLS[name]() for name in names]


__all__ = ["TOOLS", "Calculator", "CalculatorError", "PythonResult", "PythonTool", "evaluate", "make_tools"]
