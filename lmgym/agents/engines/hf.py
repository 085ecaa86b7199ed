"""The HF engine: the trained model itself, in a lean decode loop with a KV cache kept across turns.

The cache has one row per episode being played. Its per-row API is what both rollouts drive:
``begin(row, tokens, key)`` queues the tokens a row must still feed (a prompt, or an env's
observation) and starts a turn there; ``flush()`` runs one forward over every row that queued
something; ``step(...)`` samples one token in every row whose turn is going on, ends the turns
that end, and queues the others' new tokens; ``forget(row)`` empties a row for its next episode.
``generate`` (the ``Engine`` protocol) plays a batch of contexts with it, reusing the cached
rows that a context extends, so an episode's later turns prefill only the env's new tokens: an
episode costs O(total tokens), not O(turns x history). The overlapped rollout
(``lmgym.agents.rollout``) drives the same rows as envs come and go.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
from transformers.cache_utils import DynamicLayer

from lmgym.agents.engines.base import EnginePolicy, Generation
from lmgym.agents.engines.lora import MergedLoRA
from lmgym.agents.engines.sampling import sample
from lmgym.agents.generation import StopOnStrings, cut_action
from lmgym.core import ends_turn

LEAN_KWARGS = frozenset({"do_sample", "temperature", "top_k", "top_p"})
"""Generation kwargs the HF engine's own decode loop handles; any other goes to ``model.generate``."""


class HFEngine:
    """The trained model as its own rollout engine, with a KV cache kept across turns.

    Args:
        policy: the policy (LM and value head) that generates.
        reuse_cache: keep the KV cache across calls (``PPOConfig.engine.reuse_kv_cache``);
            ``False`` prefills every context from scratch (the reference path, same results).
        merge_lora: decode with the LoRA adapters merged into a copy of their base weights where
            they can be (``PPOConfig.engine.merge_lora``, ``lmgym.agents.engines.lora``): faster,
            the same log-probs within fp32 rounding, one more copy of the adapted weights.
    """

    exact = True

    def __init__(self, policy: EnginePolicy, reuse_cache: bool = True, merge_lora: bool = True):
        self.policy, self.reuse_cache, self.merge_lora = policy, reuse_cache, merge_lora
        self.merged = MergedLoRA()
        self.reset()

    # ------------------------------------------------------------------------ the per-row API
    def reset(self, rows: int = 0) -> None:
        """Drops the cache; ``rows`` empty rows to ``begin`` turns in."""
        self.cache: Any = None
        self.cached: list[list[int]] = [[] for _ in range(rows)]  # per row: the tokens whose keys/values it holds
        self.mask = torch.zeros(rows, 0, dtype=torch.long)  # (B, W) 1 where a cache slot is a real token
        self.queued: dict[int, list[int]] = {}  # per row: tokens to feed at the next flush
        self.turns: dict[int, Generation] = {}  # the rows whose turn is going on
        self.keys: dict[int, int | None] = {}  # each row's sampling stream
        self.logits = self.hidden = torch.zeros(0)  # (F, V), (F, H) after the last flush, for its fed rows
        self.fed: list[int] = []  # the rows the last flush ran the model on

    def forget(self, row: int) -> None:
        """Empties one row: its keys/values stay in the cache, masked out, until a compaction."""
        self.mask[row] = 0
        self.cached[row] = []

    def begin(self, row: int, tokens: Sequence[int], key: int | None = None) -> None:
        """Queues ``tokens`` (what ``row`` has not fed yet) and starts a turn in ``row``, sampled
        from the stream ``key`` (torch's RNG when no row has a key)."""
        self.queued[row] = [*self.queued.get(row, []), *tokens]
        self.turns[row] = Generation([], [], [])
        self.keys[row] = key

    def step(self, kwargs: dict[str, Any], stop_strings: Sequence[str], max_new_tokens: int) -> dict[int, Generation]:
        """Samples the next token of every turn going on (from the last ``flush``), with its
        log-prob and the value before it; returns the turns that ended (EOS, a stop string, the
        budget) by row, and queues the others' tokens for the next ``flush``. A turn's last token
        is not fed: the next turn's ``begin`` feeds it with the observation."""
        rows = sorted(self.turns)
        if not rows:
            return {}
        keys = [self.keys[r] for r in rows]
        positions = [len(self.cached[r]) for r in rows]
        where = {r: i for i, r in enumerate(self.fed)}  # a row's place in the last flush's output
        picked = [where[r] for r in rows]
        everything = picked == list(range(len(self.fed)))  # no selection: the last flush's rows as they are
        logits, hidden = (self.logits, self.hidden) if everything else (self.logits[picked], self.hidden[picked])
        tokens, logprobs = sample(logits, kwargs, None if None in keys else cast(Any, keys), positions)
        values = self.policy.module.value_head(hidden.float()).squeeze(-1).tolist()  # V before each token
        ended, tok = {}, self.policy.tokenizer
        for r, t, logprob, value in zip(rows, tokens, logprobs, values):
            turn = self.turns[r]
            turn.add(t, logprob, value)
            if len(turn) >= max_new_tokens or ends_turn(turn, tok, stop_strings):
                ended[r] = self.turns.pop(r)
            else:
                self.queued[r] = [t]
        return ended

    def flush(self) -> None:
        """One forward over every cache row, feeding what each queued (left-padded within the
        segment; a row with nothing queued feeds nothing). Rows masked out by ``forget`` are
        dropped from the cache first once they make it more than twice as wide as it needs."""
        if not self.queued:
            return
        feeds = [self.queued.pop(r, []) for r in range(len(self.cached))]
        if self.mask.shape[1] > 2 * max(len(c) + len(f) for c, f in zip(self.cached, feeds)) + 256:
            feeds = [c + f for c, f in zip(self.cached, feeds)]  # compact: refeed only the real tokens
            self.cache, self.cached = None, [[] for _ in feeds]
            self.mask = torch.zeros(len(feeds), 0, dtype=torch.long)
        width, pad = max([1, *map(len, feeds)]), self.policy.tokenizer.pad_token_id
        segment = torch.tensor([[pad] * (width - len(s)) + s for s in feeds])  # (B, n) left-padded
        seg_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in feeds])  # (B, n)
        for cached, s in zip(self.cached, feeds):
            cached.extend(s)
        fed = [r for r, s in enumerate(feeds) if s]
        if len(fed) == len(feeds) or not self.selectable():
            fed = list(range(len(feeds)))
        self.logits, self.hidden = self.forward(segment, seg_mask, fed)
        self.fed = fed

    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        """The policy in eval mode, without gradients, for a decode loop (an FSDP2 policy's own
        parameters gathered: the loop calls its LM and value head directly), its LoRA adapters
        merged where they can be (``lmgym.agents.engines.lora``)."""
        model, module = self.policy.model, self.policy.module
        was_training = model.training
        model.eval()
        sharded = hasattr(module, "unshard")  # FSDP2: its own parameters gathered for the whole loop
        if sharded:
            module.unshard()
        try:
            with torch.no_grad(), self.merged(model) if self.merge_lora and not sharded else contextlib.nullcontext():
                yield
        finally:
            if sharded:
                module.reshard()
            model.train(was_training)

    # ------------------------------------------------------------------------ the Engine protocol
    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]:
        """One turn per context. ``keys`` (one int per context, e.g. per episode) make each row
        sample from its own random stream (``sampling.uniforms``), so what a row samples does not
        depend on the other rows of the batch; without them the lean loop samples from torch's
        global RNG. ``model.generate`` (other kwargs) always uses the global RNG."""
        kwargs = {**self.policy.sampling_kwargs, **generation_kwargs}
        if not self.lean(kwargs):
            self.reset()
            return [Generation(t) for t in hf_generate(self.policy, contexts, stop_strings, max_new_tokens, kwargs)]
        ended: dict[int, Generation] = {}
        with self.decoding():
            self.prefill(contexts, keys)
            while self.turns:
                self.flush()
                ended.update(self.step(kwargs, stop_strings, max_new_tokens))
        return [ended[i] for i in range(len(contexts))]

    def sync_weights(self) -> None:
        self.reset()  # the same weights generate; only cached keys/values are stale

    def close(self) -> None:
        self.reset()

    @staticmethod
    def lean(kwargs: dict[str, Any]) -> bool:
        """Whether the engine's own decode loop handles these generation kwargs."""
        return not set(kwargs) - LEAN_KWARGS

    # ------------------------------------------------------------------------ internals
    def prefill(self, contexts: list[list[int]], keys: Sequence[int] | None) -> None:
        """Begins a turn for context i in row i, queuing what the cache lacks of it: the cache
        is continued when every context extends a cached row (rows reordered to match)."""
        rows = self.match(contexts) if self.reuse_cache else None
        if rows is None:
            self.reset(len(contexts))
        else:
            if rows != list(range(len(self.cached))):
                self.cache.batch_select_indices(torch.tensor(rows, device=self.policy.device))
                self.mask = self.mask[rows]
            self.cached = [self.cached[r] for r in rows]
            self.queued, self.turns, self.keys = {}, {}, {}
        for i, ctx in enumerate(contexts):
            self.begin(i, ctx[len(self.cached[i]) :], None if keys is None else int(keys[i]))

    def match(self, contexts: list[list[int]]) -> list[int] | None:
        """For each context, the cache row it extends; ``None`` unless all of them extend one."""
        if self.cache is None:
            return None
        rows, taken = [], set()
        for ctx in contexts:
            row = next(
                (
                    r
                    for r, cached in enumerate(self.cached)
                    if r not in taken and len(cached) < len(ctx) and ctx[: len(cached)] == cached
                ),
                None,
            )
            if row is None:
                return None
            rows.append(row)
            taken.add(row)
        return rows

    def selectable(self) -> bool:
        """Whether a flush can run the model on some rows only: every cache layer a ``GrowingLayer``
        that holds keys already (a turn's finished rows then cost nothing while the others decode)."""
        layers = getattr(self.cache, "layers", None) or []
        return bool(layers) and all(type(layer) is GrowingLayer and layer.is_initialized for layer in layers)

    def forward(
        self, tokens: torch.Tensor, seg_mask: torch.Tensor, rows: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model on one segment (B, n) after the cache, for ``rows`` only (the others' segment
        is all padding: their cache grows by masked slots); the last logits and hidden state of
        each of ``rows``."""
        from transformers import DynamicCache

        model, device = self.policy.model, self.policy.device
        if self.cache is None:
            self.cache = growing_cache(DynamicCache(config=model.config))
        before = self.mask.sum(-1, keepdim=True)  # (B, 1) real tokens already cached
        positions = (before + seg_mask.cumsum(-1) - 1).clamp(min=0)  # (B, n) positions of real tokens
        self.mask = torch.cat([self.mask, seg_mask], dim=1)  # (B, W + n)
        some = len(rows) < len(self.cached)
        select = torch.tensor(rows)
        layers = self.cache.layers if some else []
        for layer in layers:
            layer.rows = select.to(device)
        try:
            out = model(
                input_ids=tokens[select].to(device),
                attention_mask=self.mask[select].to(device),
                position_ids=positions[select].to(device),
                **{cache_argument(model): self.cache},
                use_cache=True,
                output_hidden_states=True,
                logits_to_keep=1,
            )
        finally:
            for layer in layers:
                layer.rows = None
        return out.logits[:, -1], out.hidden_states[-1][:, -1]


class SnapshotEngine(HFEngine):
    """The HF engine on a copy of the policy: it generates while the trainer updates the policy
    itself (``PPOConfig.rollout.overlap_update``); ``sync_weights`` copies the weights over."""

    def __init__(self, policy: EnginePolicy, reuse_cache: bool = True, merge_lora: bool = True):
        import copy
        import dataclasses

        self.source = policy.module
        super().__init__(dataclasses.replace(policy, module=copy.deepcopy(policy.module)), reuse_cache, merge_lora)

    def sync_weights(self) -> None:
        with torch.no_grad():
            self.policy.module.load_state_dict(self.source.state_dict())
        self.reset()


def growing_cache(cache: Any) -> Any:
    """``cache`` with each of its plain ``DynamicLayer``s made a ``GrowingLayer`` (sliding-window
    and other layer kinds stay as they are)."""
    for i, layer in enumerate(getattr(cache, "layers", [])):
        if type(layer) is DynamicLayer:
            cache.layers[i] = GrowingLayer()
    return cache


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in buffers that double when full, so a decode
    step copies its one new token where ``DynamicLayer`` concatenates (copies) the whole cache: a
    text world's episode of 10,000 tokens spent most of its decode time in those copies."""

    room: list[torch.Tensor] = []  # keys and values, with room after the cached tokens
    rows: torch.Tensor | None = None
    """While set, the forward runs on these rows only: their new keys and values are written
    there, the other rows' new slots are zeros (masked out), and the rows' cache is returned."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        keys, values = (self.keys, self.values) if self.is_initialized else (None, None)
        if keys is None or values is None or keys.numel() == 0:
            self.room = []
            return super().update(key_states, value_states, *args, **kwargs)
        n, m = keys.shape[-2], key_states.shape[-2]
        if not self.room or self.room[0].data_ptr() != keys.data_ptr() or self.room[0].shape[-2] < n + m:
            grow = max(m, n)  # re-adopted after anything replaced the keys (a batch_select_indices)
            self.room = [torch.cat([t, t.new_empty(*t.shape[:-2], grow, t.shape[-1])], dim=-2) for t in (keys, values)]
        if self.rows is None:
            self.room[0][..., n : n + m, :] = key_states
            self.room[1][..., n : n + m, :] = value_states
        else:  # zeros, not stale memory, where a masked slot meets a zero attention weight (0 * nan is nan)
            for room, new in zip(self.room, (key_states, value_states)):
                room[..., n : n + m, :] = 0
                room[self.rows, ..., n : n + m, :] = new
        self.keys, self.values = self.room[0][..., : n + m, :], self.room[1][..., : n + m, :]
        if self.rows is not None:
            return self.keys[self.rows], self.values[self.rows]
        return self.keys, self.values


def cache_argument(model: Any) -> str:
    """The name under which ``model``'s forward takes its KV cache: ``cache`` (later transformers 5
    releases) or ``past_key_values`` (5.19 and earlier). Passing the wrong one is silently ignored,
    and the decode loop would then run without the cache: wrong log-probs, no error."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel's is **kwargs
    return _cache_argument(cast(Any, type(base)))


@functools.cache
def _cache_argument(model_class: Any) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@torch.no_grad()
def hf_generate(
    policy: EnginePolicy,
    contexts: list[list[int]],
    stop_strings: Sequence[str],
    max_new_tokens: int,
    kwargs: dict[str, Any],
) -> list[list[int]]:
    """``model.generate`` on the whole contexts (left-padded), for generation kwargs the lean loop
    does not handle; each row cut where the turn ends (``lmgym.core.action_length``)."""
    tok = policy.tokenizer
    width = max(map(len, contexts))
    input_ids = torch.full((len(contexts), width), tok.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, ctx in enumerate(contexts):
        input_ids[i, width - len(ctx) :] = torch.tensor(ctx)
        attention_mask[i, width - len(ctx) :] = 1
    if not kwargs.get("do_sample", True):  # greedy: sampling settings would only warn
        kwargs = {k: v for k, v in kwargs.items() if k not in ("temperature", "top_k", "top_p")}
    model: Any = policy.model
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=input_ids.to(policy.device),
        attention_mask=attention_mask.to(policy.device),
        max_new_tokens=max_new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        stopping_criteria=[StopOnStrings(tok, stop_strings, width)] if stop_strings else [],
        **kwargs,
    )
    model.train(was_training)
    return [cut_action(row[width:].tolist(), tok, stop_strings, max_new_tokens) for row in out.cpu()]


__all__ = [
    "LEAN_KWARGS",
    "GrowingLayer",
    "HFEngine",
    "SnapshotEngine",
    "cache_argument",
    "growing_cache",
    "hf_generate",
]
