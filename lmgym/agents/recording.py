"""Episodes kept for ``lmgym view``: per-token log-probs, values, advantages, KL and ratios.

``learn`` keeps a bounded number of episodes at several points of training (before the first
update, every ``record_every`` updates, after the last) in ``LOG_DIR/episodes.jsonl``: training
episodes as sampled, with what the update did to them, and greedy episodes on the same held-out
seeds each time, to compare before and after. One compact JSON object per episode
(``episode_record``); ``lmgym.report`` turns the file into an HTML report.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from lmgym.agents.batch import UpdateBatch
from lmgym.agents.policy import token_logprobs
from lmgym.agents.trajectories import Episode, pad_batch
from lmgym.tokenizers import Tokenizer

if TYPE_CHECKING:
    from lmgym.agents.learner import Learner

EPISODES_FILE = "episodes.jsonl"


def append_records(path: str | os.PathLike, records: Sequence[dict[str, Any]]) -> None:
    """Appends one JSON line per record; a link at ``path`` is refused (``OSError``), never followed."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


def token_pieces(tokenizer: Tokenizer, ids: Sequence[int], window: int = 8) -> list[str]:
    """The text each token adds, so that the pieces join into the decoded text (a tokenizer
    that decodes one token differently in context, e.g. a SentencePiece space, stays exact).

    Each token's piece is what it adds to the decoding of the ``window`` tokens before it, so the
    cost is linear in the episode's length; should the pieces not join into the whole decoding
    (a token whose text depends on more than ``window`` tokens before it), every prefix is
    decoded instead.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> token_pieces(ByteTokenizer(["<a>"]), ByteTokenizer(["<a>"]).encode("hi<a>"))
        ['h', 'i', '<a>']
    """
    ids = list(ids)
    pieces = []
    for i in range(len(ids)):
        before = tokenizer.decode(ids[max(0, i - window) : i])
        text = tokenizer.decode(ids[max(0, i - window) : i + 1])
        pieces.append(text[len(before) :] if text.startswith(before) else tokenizer.decode([ids[i]]))
    if window and "".join(pieces) != tokenizer.decode(ids):
        return token_pieces_by_prefix(tokenizer, ids)
    return pieces


def token_pieces_by_prefix(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """``token_pieces`` from every prefix's decoding: exact, quadratic in the length."""
    pieces, before = [], ""
    for i in range(len(ids)):
        text = tokenizer.decode(list(ids[: i + 1]))
        pieces.append(text[len(before) :] if text.startswith(before) else tokenizer.decode([ids[i]]))
        before = text
    return pieces


def _on_actions(x: torch.Tensor | None, mask: torch.Tensor, digits: int = 4) -> list[float | None] | None:
    """Values on the action tokens only, in order, rounded (JSON stays small and finite)."""
    if x is None:
        return None
    return [round(v, digits) if math.isfinite(v) else None for v in x[mask].tolist()]


def json_values(info: dict[str, Any], max_chars: int = 4000) -> dict[str, Any]:
    """The entries of ``info`` that JSON keeps as they are (numbers, strings, lists and dicts of
    them), each at most ``max_chars`` long as JSON; numpy scalars as numbers.

    Example:
        >>> json_values({"target": "12", "n": 3, "f": print, "big": "x" * 5000})
        {'target': '12', 'n': 3}
    """
    out = {}
    for key, value in info.items():
        value = value.item() if hasattr(value, "item") and getattr(value, "ndim", 1) == 0 else value
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            continue
        if len(text) <= max_chars:
            out[str(key)] = json.loads(text)
    return out


def episode_record(
    episode: Episode,
    tokenizer: Tokenizer,
    update: int,
    kind: str,
    env_id: str | None = None,
    new_logprobs: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
) -> dict[str, Any]:
    """One episode as the viewer reads it.

    ``prompt`` (the first observation), ``completions`` (each turn's action, decoded) and
    ``info`` (the reset info updated with the last turn's, its JSON values only) are what
    ``lmgym rescore`` hands a new reward function. Per token: ``text`` (its piece) and ``mask``
    (1 where the model wrote it). Per action token,
    in order (lists as long as the number of action tokens, or ``None`` when unknown):
    ``logprob`` (at sampling), ``value``, ``adv`` (the advantage it was trained with), ``kl``
    (log-prob minus reference log-prob, k1) and ``ratio`` (new over old probability after the
    update); ``advantages`` (T,) and ``new_logprobs`` (T,) come from the update
    (``lmgym.agents.batch.UpdateBatch``) and the policy after it.
    """
    mask = episode.action_mask
    kl = None
    if episode.logprobs is not None and episode.ref_logprobs is not None:
        kl = episode.logprobs - episode.ref_logprobs
    ratio = None
    if new_logprobs is not None and episode.logprobs is not None:
        ratio = (new_logprobs - episode.logprobs).exp()
    ids, actions = episode.tokens.tolist(), mask.tolist()
    first = actions.index(True) if True in actions else len(ids)
    turns = zip([0, *(end + 1 for end in episode.turn_ends)], episode.turn_ends)  # turn t: its first..last token
    return {
        "update": update,
        "kind": kind,
        "env": env_id,
        "seed": episode.seed,
        "group": episode.group,
        "return": episode.return_,
        "success": episode.success,
        "terminated": episode.terminated,
        "truncated": episode.truncated,
        "tool_calls": episode.tool_calls,
        "turn_ends": list(episode.turn_ends),
        "rewards": [float(r) for r in episode.rewards],
        "prompt": tokenizer.decode(ids[:first]),
        "completions": [
            tokenizer.decode([i for i, m in zip(ids[a : b + 1], actions[a : b + 1]) if m]) for a, b in turns
        ],
        "info": json_values({**episode.reset_info, **(episode.infos[-1] if episode.infos else {})}),
        "text": token_pieces(tokenizer, ids),
        "mask": [int(m) for m in mask],
        "logprob": _on_actions(episode.logprobs, mask),
        "value": _on_actions(episode.values, mask),
        "adv": _on_actions(advantages, mask),
        "kl": _on_actions(kl, mask),
        "ratio": _on_actions(ratio, mask),
    }


@torch.no_grad()
def current_logprobs(agent: Learner, episodes: Sequence[Episode]) -> list[torch.Tensor]:
    """Log-probs (T,) of each episode's tokens under the agent's policy as it is now."""

    tokens, attention = pad_batch([e.tokens for e in episodes], agent.tokenizer.pad_token_id)
    device = agent.accelerator.device
    logits, _ = agent.policy(tokens.to(device), attention.to(device))
    logprobs = token_logprobs(logits, tokens.to(device), agent.config.rollout.temperature).cpu()  # (B, T)
    return [logprobs[i, : e.length] for i, e in enumerate(episodes)]


class EpisodeRecorder:
    """What ``learn`` keeps for the viewer: at each recorded update, ``n`` training episodes of
    that update and ``n`` greedy episodes on fixed held-out seeds.

    Args:
        log_dir: where ``episodes.jsonl`` goes.
        n: episodes of each kind per recorded update (``PPOConfig.record_episodes``).
        every: record every this many updates, besides before the first and after the last.
        env_id: the env's registered id, shown in the report.
        write: whether this process writes the file (every process plays the episodes, so that
            the forward passes of a distributed policy stay in step; the main process writes).
    """

    def __init__(self, log_dir: str | os.PathLike, n: int, every: int, env_id: str | None = None, write: bool = True):
        self.path = Path(log_dir) / EPISODES_FILE
        self.n, self.every, self.env_id, self.write = n, max(1, every), env_id, write

    def due(self, update: int, last: bool) -> bool:
        return last or update <= 1 or update % self.every == 0

    def record(self, agent: Learner, envs: Any, batch: UpdateBatch | None, update: int) -> None:
        """Appends this update's episodes (``agent``: a ``PPOAgent``): ``batch`` (just trained
        on, with its advantages) and the held-out ones."""
        from lmgym.agents.rollout import EVAL_SEED_OFFSET

        records = []
        kept = list(zip(batch.episodes, batch.advantages))[: self.n] if batch is not None else []
        if kept:
            new = current_logprobs(agent, [e for e, _ in kept])
            records += [
                episode_record(e, agent.tokenizer, update, "train", self.env_id, n, adv)
                for (e, adv), n in zip(kept, new)
            ]
        seeds = [EVAL_SEED_OFFSET + i for i in range(self.n)]
        probe = agent.collect(envs, self.n, group_size=1, seeds=seeds, generation_kwargs={"do_sample": False})
        advantages: list[Any] = [None] * len(probe)
        agent.score(probe)
        if agent.config.estimator == "gae":  # group estimators need groups; greedy episodes have none
            advantages = agent.derive(probe).advantages
        records += [
            episode_record(e, agent.tokenizer, update, "held-out", self.env_id, advantages=adv)
            for e, adv in zip(probe, advantages)
        ]
        if self.write:
            append_records(self.path, records)
