"""lmgym: language tasks as Gymnasium environments, and a token-level PPO agent for causal LMs.

``import lmgym`` registers every env under the ``lmgym/`` namespace; it imports neither torch
nor transformers (those load only when a feature needs them, e.g. ``lmgym.agents``).
"""

from typing import Any

from lmgym.core import EnvError, LMEnv
from lmgym.envs import register_envs
from lmgym.spaces import AnyText, TokenSequence
from lmgym.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, as_tokenizer

__version__ = "0.1.0"
__all__ = [
    "AnyText",
    "ByteTokenizer",
    "EnvError",
    "HFTokenizer",
    "LMEnv",
    "TokenSequence",
    "Tokenizer",
    "as_tokenizer",
    "doctor",
    "register_envs",
]


def __getattr__(name: str) -> Any:
    """``lmgym.doctor(agent, envs)`` (``lmgym.checkup.doctor``), imported on first use."""
    if name == "doctor":
        from lmgym.checkup import doctor

        return doctor
    raise AttributeError(f"module 'lmgym' has no attribute {name!r}")


register_envs()
