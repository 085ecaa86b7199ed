"""The policy: a causal LM with a value head, and the one place where logits and labels shift."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class PolicyWithValue(nn.Module):
    """A causal LM plus a linear value head on its last hidden state, kept in fp32.

    ``forward`` returns the LM's logits (B, T, V) and per-position values (B, T), where
    ``values[:, t]`` estimates the return from the state ``tokens[:, : t + 1]``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        config: Any = model.config
        self.value_head = nn.Linear(config.hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        hidden = out.hidden_states[-1]  # (B, T, H)
        values = self.value_head(hidden.float()).squeeze(-1)  # (B, T)
        return out.logits, values


def shifted_logprobs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-softmax of the logits that predict tokens 1..T-1, at the sampling temperature (B, T-1, V)."""
    return torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0, log_softmaxed: bool = False
) -> torch.Tensor:
    """Log-prob of each token given the ones before it, at the sampling temperature.

    Returns (B, T): ``out[:, t] = log p(input_ids[:, t] | input_ids[:, :t])`` and ``out[:, 0] = 0``.
    With ``log_softmaxed``, ``logits`` is already ``shifted_logprobs(...)`` (B, T-1, V): the loss
    shares one log-softmax between log-probs and entropy.
    """
    logp = logits if log_softmaxed else shifted_logprobs(logits, temperature)  # (B, T-1, V)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    return F.pad(picked, (1, 0))


def token_entropy(logits: torch.Tensor, temperature: float = 1.0, log_softmaxed: bool = False) -> torch.Tensor:
    """Entropy of the distribution each token was drawn from, aligned like ``token_logprobs``."""
    logp = logits if log_softmaxed else shifted_logprobs(logits, temperature)  # (B, T-1, V)
    return F.pad(-(logp.exp() * logp).sum(-1), (1, 0))  # (B, T)


def state_values(values: torch.Tensor) -> torch.Tensor:
    """Values aligned to tokens: ``out[:, t]`` is V of the state before token t (B, T)."""
    return F.pad(values[:, :-1], (1, 0))
