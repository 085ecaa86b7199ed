"""lmgym: language tasks as Gymnasium environments, and a token-level PPO agent for causal LMs.

``import lmgym`` registers every env under the ``lmgym/`` namespace; it imports neither torch
nor transformers (those load only when a feature needs them, e.g. ``lmgym.agents``).
"""

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
    "register_envs",
]

register_envs()
