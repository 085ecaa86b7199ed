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
        self.head_on_hidden = head_on_hidden(model)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, V) and values (B, T); with ``action_mask`` (B, T), only the logits that
        predict an action token, (N, V) in row-major order (``predicting(action_mask)``): the
        output embeddings run on those positions' hidden states alone, where the model's logits
        are exactly that (``head_on_hidden``), saving the (B, T, V) tensor of a large vocabulary."""
        logits, hidden = action_logits(self.model, input_ids, attention_mask, action_mask, self.head_on_hidden)
        return logits, self.value_head(hidden.float()).squeeze(-1)  # (B, T) values


def action_logits(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    action_mask: torch.Tensor | None,
    head_on_hidden: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``model``'s logits and last hidden state (B, T, H). Without ``action_mask`` the logits are
    (B, T, V); with it, only those that predict an action token, (N, V) in row-major order,
    computed from the hidden states of those positions alone when ``head_on_hidden``."""
    gather = action_mask is not None and head_on_hidden
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        **({"logits_to_keep": 1} if gather else {}),
    )
    hidden = out.hidden_states[-1]  # (B, T, H)
    if action_mask is None:
        return out.logits, hidden
    where = predicting(action_mask)
    if gather:
        head: Any = model.get_output_embeddings()  # type: ignore[operator]
        return head(hidden[where]), hidden
    return out.logits[where], hidden


def head_on_hidden(model: nn.Module) -> bool:
    """Whether ``model``'s logits are its output embeddings applied to its last hidden state (no
    soft-capping or scaling after the head), checked once on a short input."""
    head = model.get_output_embeddings()  # type: ignore[operator]
    if head is None:
        return False
    ids = torch.arange(1, 9, device=head.weight.device)[None] % model.config.vocab_size  # type: ignore[union-attr,operator]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            model(input_ids=ids, logits_to_keep=1)  # the gathered path asks for one position's logits
            same = torch.allclose(head(out.hidden_states[-1]).float(), out.logits.float(), atol=1e-4, rtol=1e-4)
    except TypeError:  # a forward without logits_to_keep
        same = False
    finally:
        model.train(was_training)
    return bool(same)


def predicting(action_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) True at the positions whose logits predict an action token (the one after each)."""
    return F.pad(action_mask[:, 1:], (0, 1), value=False)


def action_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, action_mask: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """From the (N, V) logits that predict the action tokens: their log-softmax at the sampling
    temperature (N, V), and each action token's log-prob laid out as (B, T), 0 elsewhere."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # (N, V)
    actions = action_mask.clone()
    actions[:, 0] = False  # nothing predicts the first token
    picked = logp.gather(-1, input_ids[actions][:, None]).squeeze(-1)  # (N,)
    return logp, torch.zeros(actions.shape, dtype=picked.dtype, device=picked.device).masked_scatter(actions, picked)


def shifted_logprobs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-softmax of the logits that predict tokens 1..T-1, at the sampling temperature (B, T-1, V)."""
    return torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-prob of each token given the ones before it, at the sampling temperature.

    Returns (B, T): ``out[:, t] = log p(input_ids[:, t] | input_ids[:, :t])`` and ``out[:, 0] = 0``.
    """
    logp = shifted_logprobs(logits, temperature)  # (B, T-1, V)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    return F.pad(picked, (1, 0))


def state_values(values: torch.Tensor) -> torch.Tensor:
    """Values aligned to tokens: ``out[:, t]`` is V of the state before token t (B, T)."""
    return F.pad(values[:, :-1], (1, 0))
