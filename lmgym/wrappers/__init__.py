"""lmgym's Gymnasium wrappers."""

from lmgym.wrappers.chat_template import ChatTemplate
from lmgym.wrappers.observation import RecordTranscript, TokenizeObservation
from lmgym.wrappers.token_level import TokenLevel
from lmgym.wrappers.tool_use import ToolUse

__all__ = ["ChatTemplate", "RecordTranscript", "TokenLevel", "TokenizeObservation", "ToolUse"]
