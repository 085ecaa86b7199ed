"""Scoring: what ``update`` needs of an episode besides its tokens, filled in batched forward passes.

``score`` (``PPOAgent.score``) fills the old log-probs and values an engine did not give (an
inexact engine's, or a stale batch's), a truncated episode's bootstrap value, and the reference
log-probs of the KL term (``ref_logits``: the reference model, or a PEFT policy's base with its
adapters off). Both are ``PPOAgent`` methods, overridable as the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from lmgym.agents.policy import action_logits, action_logprobs, state_values
from lmgym.agents.trajectories import Episode, pad_batch

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent


@torch.no_grad()
def score(agent: PPOAgent, episodes: Iterable[Episode]) -> None:
    """Fills what each unscored episode lacks: old log-probs and values (the HF engine's
    decode loop already gave them), the value after a truncated episode's last token, and
    reference log-probs (skipped when the KL term is off: ``kl_coef=0``, not adaptive)."""
    todo = [e for e in episodes if not e.scored]
    temperature = agent.config.rollout.temperature
    for chunk in chunks(agent, [e for e in todo if e.logprobs is None or e.values is None or e.truncated]):
        tokens, attention = padded(agent, chunk)
        actions = pad_batch([e.action_mask for e in chunk], False)[0].to(tokens.device)
        logits, values = agent.policy(tokens, attention, actions)  # (N, V): the action tokens' only
        logprobs = action_logprobs(logits, tokens, actions, temperature)[1]  # (B, T)
        state_v = state_values(values)  # (B, T)
        for row, e in enumerate(chunk):
            T, mask = e.length, e.action_mask
            if e.logprobs is None or e.values is None:
                e.logprobs = torch.where(mask, logprobs[row, :T].cpu(), 0.0)
                e.values = torch.where(mask, state_v[row, :T].float().cpu(), 0.0)
            e.bootstrap_value = float(values[row, T - 1])
    kl_off = agent.kl_controller.value == 0 and not agent.config.adaptive_kl
    for chunk in chunks(agent, [e for e in todo if e.ref_logprobs is None]):
        if kl_off:  # as TRL with beta=0: no reference forward, KL reads 0
            for e in chunk:
                e.ref_logprobs = e.logprobs
            continue
        tokens, attention = padded(agent, chunk)
        actions = pad_batch([e.action_mask for e in chunk], False)[0].to(tokens.device)
        ref_logprobs = action_logprobs(agent.ref_logits(tokens, attention, actions), tokens, actions, temperature)[1]
        for row, e in enumerate(chunk):
            e.ref_logprobs = torch.where(e.action_mask, ref_logprobs[row, : e.length].cpu(), 0.0)


def chunks(agent: PPOAgent, episodes: list[Episode]) -> Iterator[list[Episode]]:
    size = agent.config.model.forward_batch_size
    return (episodes[i : i + size] for i in range(0, len(episodes), size))


def padded(agent: PPOAgent, episodes: list[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, attention = pad_batch([e.tokens for e in episodes], agent.tokenizer.pad_token_id)
    return tokens.to(agent.accelerator.device), attention.to(agent.accelerator.device)


def ref_logits(agent: PPOAgent, tokens: torch.Tensor, attention: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The reference model's logits (N, V) that predict the action tokens (the PEFT base with
    adapters off, for a PEFT model)."""
    gather = agent.accelerator.unwrap_model(agent.policy).head_on_hidden
    if agent.ref_model is not None:
        return action_logits(agent.ref_model, tokens, attention, actions, gather)[0]
    model: Any = agent.model  # a PeftModel
    with model.disable_adapter():
        return action_logits(model, tokens, attention, actions, gather)[0]


__all__ = ["chunks", "padded", "ref_logits", "score"]
