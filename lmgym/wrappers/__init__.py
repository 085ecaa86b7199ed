"""lmgym's Gymnasium wrappers."""

from lmgym.wrappers.tool_use import ToolUse

__all__ = ["ToolUse"]
