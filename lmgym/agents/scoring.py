"""Scoring: what ``update`` needs of an episode besides its tokens, filled in batched forward passes.

A ``Scorer`` is built from parts, not from the agent: the policy module (logits and values), the
reference forward (``PPOAgent.ref_logits``: the reference model, or a PEFT policy's base with its
adapters off), the pad token, the sampling temperature and the batch size. It fills the old
log-probs and values an engine did not give (an inexact engine's, a stale batch's), a truncated
episode's bootstrap value, and the reference log-probs of the KL term.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from lmgym.agents.policy import action_logprobs, state_values
from lmgym.agents.trajectories import Episode, pad_batch

ReferenceForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(tokens, attention_mask, action_mask) -> logits (N, V)`` of the reference policy for the action tokens."""


class Scorer:
    """Fills the scores of episodes (module docs).

    Args:
        policy: the policy module: ``policy(tokens, attention, action_mask)`` gives the action
            tokens' logits (N, V) and the values (B, T).
        reference: the reference policy's forward (``ReferenceForward``).
        pad_token_id: what pads a batch.
        temperature: the sampling temperature, read at each call (log-probs are computed at it).
        batch_size: episodes per forward pass.
        device: where the forward passes run.
    """

    def __init__(
        self,
        policy: Any,
        reference: ReferenceForward,
        pad_token_id: int,
        temperature: Callable[[], float],
        batch_size: int,
        device: torch.device,
    ):
        self.policy, self.reference, self.pad_token_id = policy, reference, pad_token_id
        self.temperature, self.batch_size, self.device = temperature, batch_size, device

    @torch.no_grad()
    def __call__(
        self,
        episodes: Iterable[Episode],
        with_reference: bool = True,
        version: int | None = None,
        max_staleness: int = 1,
        with_bootstrap: bool = True,
    ) -> None:
        """Fills what each unscored episode lacks: old log-probs and values (the HF engine's decode
        loop already gave them), the value after a truncated episode's last token
        (``with_bootstrap=False``: left at 0, for an estimator that reads no values), and reference
        log-probs (``with_reference=False``: the policy's own, as TRL does with beta=0).

        With ``version`` (the policy's, updates done), an episode sampled by an older policy (the
        overlapped update's) keeps its log-probs as the sampler's, for the importance weights, and
        is scored anew under the current policy; one more than ``max_staleness`` versions old is
        refused (``ValueError``)."""
        episodes = list(episodes)
        for e in episodes:
            if version is None or e.versions is None or not e.action_mask.any():
                continue
            age = version - int(e.versions[e.action_mask].min())
            if age > max_staleness:
                raise ValueError(f"an episode sampled {age} updates ago, more than max_staleness={max_staleness}")
            if age > 0 and e.sampler_logprobs is None and e.logprobs is not None:
                e.sampler_logprobs, e.logprobs, e.values = e.logprobs, None, None
        todo = [e for e in episodes if not e.scored]
        temperature = self.temperature()
        lacking = [e for e in todo if e.logprobs is None or e.values is None or (with_bootstrap and e.truncated)]
        for chunk in self.chunks(lacking):
            tokens, attention, actions = self.padded(chunk)
            logits, values = self.policy(tokens, attention, actions)  # (N, V): the action tokens' only
            logprobs = action_logprobs(logits, tokens, actions, temperature)[1]  # (B, T)
            state_v = state_values(values)  # (B, T)
            for row, e in enumerate(chunk):
                T, mask = e.length, e.action_mask
                if e.logprobs is None or e.values is None:
                    e.logprobs = torch.where(mask, logprobs[row, :T].cpu(), 0.0)
                    e.values = torch.where(mask, state_v[row, :T].float().cpu(), 0.0)
                e.bootstrap_value = float(values[row, T - 1])
        for chunk in self.chunks([e for e in todo if e.ref_logprobs is None]):
            if not with_reference:
                for e in chunk:
                    e.ref_logprobs = e.logprobs
                continue
            tokens, attention, actions = self.padded(chunk)
            ref = action_logprobs(self.reference(tokens, attention, actions), tokens, actions, temperature)[1]
            for row, e in enumerate(chunk):
                e.ref_logprobs = torch.where(e.action_mask, ref[row, : e.length].cpu(), 0.0)

    def chunks(self, episodes: list[Episode]) -> Iterator[list[Episode]]:
        return (episodes[i : i + self.batch_size] for i in range(0, len(episodes), self.batch_size))

    def padded(self, episodes: list[Episode]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens, attention mask and action mask (B, T) of ``episodes``, on the device."""
        tokens, attention = pad_batch([e.tokens for e in episodes], self.pad_token_id)
        actions = pad_batch([e.action_mask for e in episodes], False)[0]
        return tokens.to(self.device), attention.to(self.device), actions.to(self.device)


__all__ = ["ReferenceForward", "Scorer"]
