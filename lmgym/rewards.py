"""Reward functions for ``Prompt-v0`` and ``Pipeline-v0`` beyond plain Python functions."""

from __future__ import annotations

from typing import Any


def from_model(model: Any, tokenizer: Any, label: int = 0, max_length: int = 512, batch: bool = False) -> Any:
    """A reward function backed by an HF sequence classifier (a reward model).

    Returns ``reward_fn(prompt, completion, info) -> float``: the classifier's logit for
    ``label`` on ``prompt + completion`` (for a pipeline, the completions joined).

    Example:
        >>> from transformers import GPT2Config, GPT2ForSequenceClassification
        >>> rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=258, n_embd=16, n_layer=1, n_head=2,
        ...                                               num_labels=1, pad_token_id=257))
        >>> import lmgym
        >>> fn = from_model(rm, lmgym.ByteTokenizer())
        >>> isinstance(fn("Say hi.", "hi", {}), float)
        True
    """
    import torch

    from lmgym.tokenizers import as_tokenizer

    tok = as_tokenizer(tokenizer)
    model.eval()
    device = next(model.parameters()).device

    def reward_fn(prompt: str, completion: Any, info: dict[str, Any]) -> float:
        text = prompt + ("".join(completion) if isinstance(completion, list) else completion)
        ids = tok.encode(text)[-max_length:] or [tok.eos_token_id]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=device)).logits  # (1, num_labels)
        return float(logits[0, label])

    return reward_fn
