"""Tools an env can offer the model: text in, text out.

A tool is any callable ``tool(text) -> str`` with a ``name`` (the tag the model writes, as in
``<calc>2+2</calc>``). ``lmgym.wrappers.ToolUse`` gives any env a set of tools.
"""

from lmgym.tools.calculator import Calculator, CalculatorError, evaluate

__all__ = ["Calculator", "CalculatorError", "evaluate"]
