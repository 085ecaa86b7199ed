"""Turn endings: EOS, the env's stop strings (also when completed mid-token), or a length."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria

from lmgym.tokenizers import Tokenizer


def cut_action(ids: Sequence[int], tokenizer: Tokenizer, stop_strings: Sequence[str], max_tokens: int) -> list[int]:
    """The action a row of generated ids makes: up to and including the token that ends it.

    A turn ends at EOS, at the token that completes a stop string (kept whole, even when the
    stop string ends inside it), or after ``max_tokens``.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tok = ByteTokenizer()
        >>> cut_action(tok.encode("1+1</calc>junk"), tok, ["</calc>"], 64) == tok.encode("1+1</calc>")
        True
    """
    ids = [int(i) for i in ids[:max_tokens]]
    for j, token in enumerate(ids):
        if token == tokenizer.eos_token_id:
            return ids[: j + 1]
        if stop_strings and any(s in tokenizer.decode(ids[: j + 1]) for s in stop_strings):
            return ids[: j + 1]
    return ids


class StopOnStrings(StoppingCriteria):
    """Marks each row done once its generated text holds a stop string (rows end separately)."""

    def __init__(self, tokenizer: Tokenizer, stop_strings: Sequence[str], prompt_length: int):
        self.tokenizer, self.stop_strings, self.prompt_length = tokenizer, list(stop_strings), prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor | None, **kwargs: object) -> torch.Tensor:
        done = [
            any(s in self.tokenizer.decode(row[self.prompt_length :].tolist()) for s in self.stop_strings)
            for row in input_ids
        ]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
