"""Turn endings for ``model.generate``: EOS, the env's stop strings (also when completed mid-token), or a length."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria

from lmgym.core import action_length, ends_turn
from lmgym.tokenizers import Tokenizer


def cut_action(ids: Sequence[int], tokenizer: Tokenizer, stop_strings: Sequence[str], max_tokens: int) -> list[int]:
    """The action a row of generated ids makes: up to and including the token that ends it
    (``lmgym.core.action_length``); all of them if none does.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tok = ByteTokenizer()
        >>> cut_action(tok.encode("1+1</calc>junk"), tok, ["</calc>"], 64) == tok.encode("1+1</calc>")
        True
    """
    ids = [int(i) for i in ids]
    return ids[: action_length(ids, tokenizer, stop_strings, max_tokens) or max_tokens]


class StopOnStrings(StoppingCriteria):
    """Marks a row done once its newest token ends the turn (``lmgym.core.ends_turn``); HF's
    ``generate`` keeps rows that are done, done."""

    def __init__(self, tokenizer: Tokenizer, stop_strings: Sequence[str], prompt_length: int):
        self.tokenizer, self.stop_strings, self.prompt_length = tokenizer, list(stop_strings), prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor | None, **kwargs: object) -> torch.Tensor:
        done = [ends_turn(row[self.prompt_length :].tolist(), self.tokenizer, self.stop_strings) for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
