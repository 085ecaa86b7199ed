"""Tools an env can offer the model: text in, text out.

A tool is any callable ``tool(text) -> str`` with a ``name`` (the tag the model writes, as in
``<calc>2+2</calc>``). ``lmgym.wrappers.ToolUse`` gives any env a set of tools: ``Calculator``
(an AST-evaluated, bounded arithmetic expression) and ``PythonTool`` (model-written code in a
sandboxed subprocess, ``lmgym.tools.python``).
"""

from lmgym.tools.calculator import Calculator, CalculatorError, evaluate
from lmgym.tools.python import PythonResult, PythonTool

__all__ = ["Calculator", "CalculatorError", "PythonResult", "PythonTool", "evaluate"]
