"""Sampling a token per row from logits: greedy, from torch's RNG, or from each row's own stream.

An episode's stream is a key (``stream_key``: one per episode of a ``collect``); the uniform a
row draws for the token at position p is a pure function of (key, p) (``uniforms``, SplitMix64),
so what an episode samples does not depend on which other episodes share its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on each uint64 (Steele et al. 2014), wrapping mod 2**64."""
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def stream_key(base: int, j: int) -> int:
    """The sampling stream of the ``j``-th episode of a ``collect`` (``base`` drawn once per call)."""
    return int(splitmix64(np.array([(base + j) & (2**64 - 1)], dtype=np.uint64))[0])


def uniforms(keys: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """One uniform in [0, 1) per (key, position), a pure function of the pair (SplitMix64): the
    random stream of an episode (its key) indexed by the position of the token it samples."""
    k = np.array([int(k) & (2**64 - 1) for k in keys], dtype=np.uint64)
    p = np.array(positions, dtype=np.uint64)
    bits = splitmix64(k ^ splitmix64(p)) >> np.uint64(11)  # 53 bits: exact in a float64
    return torch.from_numpy(bits.astype(np.float64) / float(1 << 53))


def sample(
    logits: torch.Tensor, kwargs: dict[str, Any], keys: Sequence[int] | None, positions: Sequence[int]
) -> tuple[list[int], list[float]]:
    """Each row's next token and its log-prob at the sampling temperature (before top-k/top-p).
    Greedy when ``do_sample`` is false; with ``keys``, row i inverts its filtered distribution's
    CDF at ``uniforms(keys, positions)[i]``, else ``torch.multinomial`` draws."""
    greedy = not kwargs.get("do_sample", True)
    temperature = 1.0 if greedy else float(kwargs.get("temperature", 1.0))
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature
    logp = torch.log_softmax(scaled, dim=-1)  # (B, V)
    if greedy:
        tokens = scaled.argmax(-1)
    else:
        top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
        unfiltered = not top_k and (top_p is None or top_p >= 1.0)
        probs = logp.exp() if unfiltered else filtered(scaled, top_k, top_p).softmax(-1)  # (B, V)
        if keys is None:
            tokens = torch.multinomial(probs, 1).squeeze(-1)
        else:
            cdf = probs.cumsum(-1)  # (B, V)
            u = uniforms(keys, positions).to(cdf.device) * cdf[:, -1]
            tokens = torch.searchsorted(cdf, u[:, None].contiguous(), right=True).squeeze(-1)
            tokens = tokens.clamp(max=cdf.shape[-1] - 1)
    picked = logp.gather(-1, tokens[:, None]).squeeze(-1)  # (B,)
    return tokens.tolist(), picked.tolist()


def filtered(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Logits with all but the top-k and the top-p nucleus set to -inf (HF's semantics; 0 / 1.0 off)."""
    if top_k:
        kth = logits.topk(min(int(top_k), logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1)  # ascending
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - top_p
        drop[..., -1] = False  # keep at least one token
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits


__all__ = ["filtered", "sample", "splitmix64", "stream_key", "uniforms"]
