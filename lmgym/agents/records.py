"""What the viewer (``lmgym view``, ``Trajectories.to_html``) reads of an episode: one record
a episode, the text each token adds, the JSON-safe part of an info. Plain functions of an
episode's fields: this module imports no other part of the agent."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import torch

from lmgym.tokenizers import Tokenizer


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
    episode: Any,
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


__all__ = ["episode_record", "json_values", "token_pieces"]
