"""Episodes as the agent keeps them: one token stream per episode, with what was sampled marked."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lmgym.tokenizers import Tokenizer


@dataclass
class Episode:
    """One episode: ``prompt + action_1 + obs_1 + action_2 + ...`` as token ids.

    Per-token tensors are aligned with ``tokens``: position t describes token t. ``logprobs[t]``
    is log p(token t | tokens before it) and ``values[t]`` the value of the state before it;
    both are 0 where ``action_mask`` is False (prompt and environment tokens).

    Attributes:
        tokens: (T,) the whole context, with sampled tokens exactly as sampled.
        action_mask: (T,) True on tokens the model generated.
        turn_ends: index of the last token of each turn's action.
        rewards: one reward per turn; it sits on that turn's last action token.
        seed: the reset seed (``None`` if unknown).
        terminated / truncated: how the episode ended.
        group: episodes with the same group share a task (``collect(..., group_size=k)``).
        infos: the env's info dict of each turn.
        reset_info: the info ``reset`` returned (a task's fields, e.g. its target).
        logprobs / ref_logprobs / values: (T,) filled by ``PPOAgent.score``.
        bootstrap_value: V of the state after the last token (used when truncated).
        sampler_logprobs: (T,) an inexact engine's log-probs (vLLM), or a stale batch's (the
            overlapped update's), for importance correction.
        versions: (T,) the policy version (updates done) that sampled each action token; -1
            off actions (``None``: unknown, e.g. a hand-made sample).
        budget_cut: a turn used its whole token budget (``PPOConfig.mask_truncated``).

    The collector (``EpisodeBuilder``) writes an episode and the scorer fills the log-probs and
    values it lacks; what an update derives (advantages, shaped rewards) lives in its own
    ``lmgym.agents.batch.UpdateBatch``.
    """

    tokens: torch.Tensor
    action_mask: torch.Tensor
    turn_ends: list[int]
    rewards: list[float]
    seed: int | None = None
    terminated: bool = True
    truncated: bool = False
    group: int = 0
    infos: list[dict[str, Any]] = field(default_factory=list)
    logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    bootstrap_value: float = 0.0
    sampler_logprobs: torch.Tensor | None = None
    versions: torch.Tensor | None = None
    reset_info: dict[str, Any] = field(default_factory=dict)
    budget_cut: bool = False

    def __post_init__(self) -> None:
        self.tokens = torch.as_tensor(self.tokens, dtype=torch.long)
        self.action_mask = torch.as_tensor(self.action_mask, dtype=torch.bool)
        if self.tokens.shape != self.action_mask.shape or self.tokens.ndim != 1:
            raise ValueError(
                f"tokens {tuple(self.tokens.shape)} and action_mask "
                f"{tuple(self.action_mask.shape)} must be 1-D and the same length"
            )
        if len(self.turn_ends) != len(self.rewards):
            raise ValueError(f"{len(self.rewards)} rewards for {len(self.turn_ends)} turns")
        if self.action_mask[:1].any():
            raise ValueError("the first token is context, never an action (nothing predicts it)")
        if any(not self.action_mask[t] for t in self.turn_ends):
            raise ValueError("every turn must end on an action token")

    @property
    def return_(self) -> float:
        return float(sum(self.rewards))

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def num_action_tokens(self) -> int:
        return int(self.action_mask.sum())

    @property
    def tool_calls(self) -> int:
        return sum("tool" in info for info in self.infos)

    @property
    def success(self) -> bool:
        """The env's ``is_success`` or ``correct`` in the last info, else a positive return."""
        last = self.infos[-1] if self.infos else {}
        return bool(last.get("is_success", last.get("correct", self.return_ > 0)))

    @property
    def scored(self) -> bool:
        return self.logprobs is not None and self.ref_logprobs is not None and self.values is not None


class EpisodeBuilder:
    """Grows one episode's token stream turn by turn, with what the engine reported of each
    action token (log-probs, values) when it reported them for every turn."""

    def __init__(
        self, prompt: list[int], seed: int | None = None, group: int = 0, reset_info: dict[str, Any] | None = None
    ):
        self.tokens, self.mask = list(prompt), [False] * len(prompt)
        self.reset_info = dict(reset_info or {})
        self.turn_ends: list[int] = []
        self.rewards: list[float] = []
        self.infos: list[dict[str, Any]] = []
        self.seed, self.group = seed, group
        self.terminated = self.truncated = self.budget_cut = False
        zeros = [0.0] * len(prompt)
        self.per_token: dict[str, list[float] | None] = {
            "logprobs": list(zeros),
            "values": list(zeros),
            "sampler_logprobs": list(zeros),
        }

    def add_action(self, ids: list[int], reward: float, info: dict[str, Any], **per_token: list[float] | None) -> None:
        """One turn: its ids, reward and info; ``logprobs``, ``values`` or ``sampler_logprobs``
        (one per id) when the engine gave them."""
        self.tokens += ids
        self.mask += [True] * len(ids)
        self.turn_ends.append(len(self.tokens) - 1)
        self.rewards.append(reward)
        self.infos.append(info)
        for key, kept in self.per_token.items():
            given = per_token.get(key)
            self.per_token[key] = None if kept is None or given is None or len(given) != len(ids) else kept + given

    def add_observation(self, ids: list[int]) -> None:
        self.tokens += ids
        self.mask += [False] * len(ids)
        for kept in self.per_token.values():
            if kept is not None:
                kept += [0.0] * len(ids)

    def build(self, version: int | None = None) -> Episode:
        """The episode; ``version``: the policy version that sampled its actions (``Episode.versions``)."""
        known = {k: None if v is None else torch.tensor(v) for k, v in self.per_token.items()}
        mask = torch.tensor(self.mask)
        return Episode(
            torch.tensor(self.tokens),
            mask,
            self.turn_ends,
            self.rewards,
            self.seed,
            self.terminated,
            self.truncated,
            self.group,
            self.infos,
            logprobs=known["logprobs"],
            values=known["values"],
            sampler_logprobs=known["sampler_logprobs"],
            versions=None if version is None else torch.where(mask, version, -1),
            reset_info=self.reset_info,
            budget_cut=self.budget_cut,
        )


class Trajectories:
    """A batch of episodes: what ``collect`` returns and ``update`` consumes.

    Filter, relabel (change ``episode.rewards``) or merge (``a + b``) batches freely in a
    custom loop; ``update`` recomputes advantages from the rewards it is given.
    """

    @classmethod
    def from_samples(
        cls,
        queries: Sequence[torch.Tensor],
        responses: Sequence[torch.Tensor],
        rewards: Sequence[float] | torch.Tensor,
        response_masks: Sequence[torch.Tensor] | None,
        tokenizer: Tokenizer,
    ) -> Trajectories:
        """One single-turn episode per hand-made sample (``PPOAgent.step``): the query as context,
        the response as the action (less what its mask marks 0), the reward on its last unmasked
        token, each sample its own group."""
        if not len(queries) == len(responses) == len(rewards):
            raise ValueError(f"got {len(queries)} queries, {len(responses)} responses, {len(rewards)} rewards")
        episodes = []
        for i, (q, r) in enumerate(zip(queries, responses)):
            q, r = torch.as_tensor(q).long().cpu(), torch.as_tensor(r).long().cpu()
            m = torch.ones(len(r)) if response_masks is None else torch.as_tensor(response_masks[i]).cpu()
            m = m.bool()
            if len(m) != len(r) or not m.any() or len(q) == 0:
                raise ValueError(
                    f"sample {i}: needs a non-empty query, and a response mask as long as the response "
                    "with at least one 1"
                )
            action_mask = torch.cat([torch.zeros(len(q), dtype=torch.bool), m])
            last = int(action_mask.nonzero().max())
            episodes.append(Episode(torch.cat([q, r]), action_mask, [last], [float(rewards[i])], group=i))
        return cls(episodes, tokenizer)

    def __init__(
        self,
        episodes: list[Episode],
        tokenizer: Tokenizer | None = None,
        faults: Mapping[str, float] | None = None,
        turn_budget: int | None = None,
    ):
        self.episodes = list(episodes)
        self.tokenizer = tokenizer  # set by collect; to_html needs it to show the text
        self.faults = {"timeouts": 0, "reset_timeouts": 0, "skipped": 0, **(faults or {})}
        """What went wrong while collecting: steps and resets past their deadline, episodes dropped
        for an env error (``PPOConfig.rollout.on_env_error="skip"``), the share of groups dynamic
        sampling dropped."""
        self.turn_budget = turn_budget
        """The token budget each turn had (set by collect; ``loss_type="dr_grpo"`` reads it)."""

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[Episode]:
        return iter(self.episodes)

    def __getitem__(self, i: int) -> Episode:
        return self.episodes[i]

    def __add__(self, other: Trajectories) -> Trajectories:
        """Both batches, ``other``'s groups renumbered after this one's (a group is one task)."""
        faults = {k: self.faults.get(k, 0) + other.faults.get(k, 0) for k in {*self.faults, *other.faults}}
        offset = max((e.group for e in self.episodes), default=-1) + 1
        moved = [dataclasses.replace(e, group=e.group + offset) for e in other.episodes]
        budget = self.turn_budget or other.turn_budget
        return Trajectories(self.episodes + moved, self.tokenizer or other.tokenizer, faults, budget)

    def filter(self, keep: Callable[[Episode], bool]) -> Trajectories:
        return Trajectories([e for e in self.episodes if keep(e)], self.tokenizer, dict(self.faults), self.turn_budget)

    def varied_groups(self) -> Trajectories:
        """The episodes of the groups whose returns differ (a group estimator's advantages are 0
        in the others: DAPO's dynamic sampling keeps these).

        Example:
            >>> pairs = [(1, 0), (0, 0), (1, 1), (1, 1)]  # (return, group)
            >>> b = Trajectories([Episode([0, 1], [False, True], [1], [r], group=g) for r, g in pairs])
            >>> [e.group for e in b.varied_groups()]
            [0, 0]
        """
        returns: dict[int, set[float]] = {}
        for e in self.episodes:
            returns.setdefault(e.group, set()).add(round(e.return_, 9))
        return self.filter(lambda e: len(returns[e.group]) > 1)

    def head(self, n: int, group_size: int) -> Trajectories:
        """The first whole groups, up to ``n`` episodes (at least one group)."""
        groups = list(dict.fromkeys(e.group for e in self.episodes))[: max(1, n // group_size)]
        return self.filter(lambda e: e.group in set(groups))

    def to_html(
        self,
        path: str | os.PathLike,
        tokenizer: Tokenizer | None = None,
        title: str = "lmgym episodes",
        update: int = 0,
        advantages: Sequence[torch.Tensor] | None = None,
    ) -> Path:
        """Writes these episodes as a self-contained HTML page (the ``lmgym view`` episode
        viewer): each model token coloured by its advantage (``advantages``, one (T,) per episode:
        ``agent.last_update.advantages`` after ``agent.update(batch)``), with its log-prob, value
        and KL on hover. ``tokenizer`` defaults to the one ``collect`` attached."""
        from lmgym.agents.records import episode_record
        from lmgym.report import report_data, write_html

        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise ValueError("to_html needs a tokenizer: pass tokenizer= (this batch was not made by collect)")
        per_episode = advantages if advantages is not None else [None] * len(self)
        records = [episode_record(e, tokenizer, update, "batch", advantages=a) for e, a in zip(self, per_episode)]
        return write_html(path, report_data(records, title=title))

    @property
    def returns(self) -> list[float]:
        return [e.return_ for e in self.episodes]

    def stats(self) -> dict[str, float]:
        """Episode statistics under the ``env/`` namespace."""
        n = max(len(self), 1)
        return {
            "env/return": sum(self.returns) / n,
            "env/success": sum(e.success for e in self) / n,
            "env/tool_rate": sum(e.tool_calls > 0 for e in self) / n,
            "env/turns": sum(len(e.rewards) for e in self) / n,
            "env/action_tokens": sum(e.num_action_tokens for e in self) / n,
            "env/truncated": sum(e.truncated for e in self) / n,
            **{f"env/{kind}": float(count) for kind, count in self.faults.items()},
        }

    def __repr__(self) -> str:
        return f"Trajectories({len(self)} episodes, mean return {sum(self.returns) / max(len(self), 1):.3f})"


def pad_batch(rows: Sequence[torch.Tensor], pad_value: int | float) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads 1-D tensors into (B, T) and returns it with its attention mask (B, T)."""
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_value, dtype=rows[0].dtype)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        attention[i, : len(r)] = 1
    return out, attention
