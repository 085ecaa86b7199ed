"""The embedded default model: a tiny Llama built from a config and warm-started on demonstrations.

No hub download: the model is built from a config, with a ``ByteTokenizer`` in which the env's
markup tags (``special_tokens``) are single tokens, and trained briefly with a supervised loss
on episodes the env's oracle plays. The demonstrations call the tool only part of the time
(``tool_rate``), the way a pretrained model seldom calls tools unprompted, so the starting
policy is mediocre for a real reason and RL has something to discover. The result is cached in
the user's cache dir, so a second run starts at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedModel

from lmgym.agents.models import adamw, check_model_vocab
from lmgym.agents.policy import token_logprobs
from lmgym.agents.trajectories import Episode, EpisodeBuilder, pad_batch
from lmgym.core import close_within
from lmgym.storage import cache_dir, find_damaged, written_aside
from lmgym.tokenizers import ByteTokenizer, Tokenizer, as_tokenizer


@dataclass(frozen=True)
class WarmStartConfig:
    """The default model and its supervised warm start."""

    architecture: str = "llama"
    """``"llama"`` (rotary positions) or ``"gpt2"`` (learned absolute positions). Rotary
    positions copy numbers far better at this size: on Calculator-v0, greedy episodes that call
    the tool for ``*`` were right 94% of the time after the 800-step warm start with ``"llama"``,
    against 70% (800 steps, 16,000 demonstrations) and 86-88% (1,600 steps) with ``"gpt2"``."""
    n_layer: int = 4
    """Transformer blocks (1.08M parameters with the defaults: 4 layers of width 128)."""
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 256
    steps: int = 1600
    """Supervised steps on demonstrations. 800 left seed 1's copying of results weak (34% of its
    greedy episodes copied the result wrongly once RL made it call the tool, and RL reached 66.5%);
    1600 took the same seed to 92.5% (benchmarks/learning.py)."""
    batch_size: int = 32
    learning_rate: float = 1e-3
    demonstrations: int = 4000
    tool_rate: float = 1.0
    """Share of demonstrations that follow the env's full oracle, which calls a tool when the
    task needs it (Calculator's: always for ``*`` and ``/``, for a quarter of the sums); the
    others answer without tools."""
    seed: int = 0


def env_special_tokens(env_id: str, env_kwargs: dict[str, Any] | None = None) -> list[str]:
    env = gym.make(env_id, **(env_kwargs or {}))
    try:
        return list(env.get_wrapper_attr("special_tokens"))
    except AttributeError:
        return []
    finally:
        close_within(env)


def demonstrations(
    env: gym.Env, n: int, tokenizer: Tokenizer, tool_rate: float = 1.0, seed: int = 0, seconds: float | None = None
) -> list[Episode]:
    """``n`` episodes the env's oracle plays, as token streams (actions masked in).

    With probability ``tool_rate`` an episode follows the full oracle (which calls tools when
    the task needs them: Calculator's calls the calculator for ``*`` and ``/`` and for a quarter
    of the sums); otherwise the innermost env's oracle, which answers without tools.
    An action that does not end with a stop string gets EOS, so the model learns to stop.
    With ``seconds``, no episode starts after that (the ones played are those a longer run plays first).
    An episode where the oracle's turn is longer than the env's ``max_action_tokens`` is left out.
    """
    rng = np.random.default_rng(seed)
    stops = tuple(env.get_wrapper_attr("stop_strings"))
    out: list[Episode] = []
    started, skipped, budget = time.monotonic(), 0, env.action_space.max_length  # type: ignore[attr-defined]
    for _ in range(n):
        if out and seconds is not None and time.monotonic() - started > seconds:
            print(f"warm start: {len(out)} of {n} demonstrations, the {seconds / 60:.0f} minutes for them spent")
            break
        use_tools = rng.random() < tool_rate
        oracle = env.get_wrapper_attr("oracle") if use_tools else env.unwrapped.oracle  # type: ignore[attr-defined]
        reset_seed = int(rng.integers(2**30))
        obs, _ = env.reset(seed=reset_seed)
        episode, done, fits = EpisodeBuilder(tokenizer.encode(obs), reset_seed), False, True
        while not done:
            text = oracle()
            ids = tokenizer.encode(text) + ([] if text.endswith(stops) and stops else [tokenizer.eos_token_id])
            fits = len(ids) <= budget  # a longer command is not a turn the model can take
            if not fits:
                break
            obs, reward, terminated, truncated, info = env.step(np.array(ids))
            episode.add_action(ids, float(reward), info)
            episode.add_observation(tokenizer.encode(obs))
            done = terminated or truncated
        if fits:
            out.append(episode.build())
        skipped += not fits
    if skipped:
        print(f"warm start: {skipped} demonstration(s) left out, an oracle turn longer than max_action_tokens={budget}")
    return out


def supervised_finetune(
    model: PreTrainedModel,
    episodes: list[Episode],
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int = 0,
    progress: bool = True,
    seconds: float | None = None,
) -> list[float]:
    """Cross-entropy on the action tokens of ``episodes``; returns the loss per step. With
    ``progress``, a bar shows the steps and the loss; with ``seconds``, the steps end there."""
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(seed)
    optimizer = adamw(list(model.parameters()), learning_rate)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))  # warmup, then constant
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="warm start", unit="step", disable=not progress, leave=False)
    started = time.monotonic()
    for step in bar:
        if seconds is not None and time.monotonic() - started > seconds:
            print(f"warm start: stopped after {step} of {steps} steps, its {seconds / 60:.0f} minutes spent")
            break
        rows = torch.randint(len(episodes), (batch_size,), generator=generator).tolist()
        tokens, attention = pad_batch([episodes[r].tokens for r in rows], 0)
        mask, _ = pad_batch([episodes[r].action_mask for r in rows], 0)
        logp = token_logprobs(model(input_ids=tokens, attention_mask=attention).logits, tokens)  # (B, T)
        loss = -(logp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    optimizer.zero_grad(set_to_none=True)  # the last step's gradients stay here, not in RL's first step
    model.eval()
    return losses


def tiny_gpt2(
    tokenizer: Tokenizer, n_layer: int = 2, n_embd: int = 64, n_head: int = 2, n_positions: int = 256
) -> GPT2LMHeadModel:
    """A small GPT-2 built from a config for ``tokenizer`` (its vocabulary, EOS and PAD), without
    dropout (which slows a model this small from learning to copy). Seed torch first to fix it.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tiny_gpt2(ByteTokenizer(), n_layer=1, n_embd=16).config.vocab_size
        258
    """
    config = GPT2Config(
        vocab_size=tokenizer.vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def tiny_llama(
    tokenizer: Tokenizer, n_layer: int = 2, n_embd: int = 64, n_head: int = 2, n_positions: int = 256
) -> PreTrainedModel:
    """A small Llama (rotary positions, SwiGLU) built from a config for ``tokenizer``; the same
    shape arguments as ``tiny_gpt2``, an MLP of 4 x ``n_embd``. Seed torch first to fix it.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> tiny_llama(ByteTokenizer(), n_layer=1, n_embd=16).config.vocab_size
        258
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=n_embd,
        intermediate_size=4 * n_embd,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        num_key_value_heads=n_head,
        max_position_embeddings=n_positions,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def cache_entry(env_id: str, env_kwargs: dict[str, Any], config: WarmStartConfig) -> tuple[str, Path]:
    """The cache key of a default model's warm start, and where it is (or would be) kept."""
    key = json.dumps(
        {"env": env_id, "kwargs": env_kwargs, "config": asdict(config), "v": 4}, sort_keys=True, default=str
    )
    return key, cache_dir() / "warmstart" / hashlib.sha256(key.encode()).hexdigest()[:16]


WARMSTART_MINUTES = 15
"""The default model's warm start stops its supervised steps here, and its demonstrations at a
third of it, when they take longer (an env of long episodes: a text world; the built-in envs'
demonstrations take seconds and their 1600 steps 4-8 minutes on 2 cores)."""

CONTEXT_PROBES = 32
"""Demonstrations played to size the context of a default model with no warm start (``steps=0``)."""


def default_model(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    config: WarmStartConfig | None = None,
    use_cache: bool = True,
    step_timeout: float | None = None,
) -> tuple[PreTrainedModel, ByteTokenizer, Path]:
    """The warm-started default model for ``env_id``: ``(model, tokenizer, cache path)``.

    Loaded from the cache when an identical warm start (same env, arguments and config) was
    made before; otherwise built and saved there. The env's oracle plays the demonstrations
    under ``lmgym.vector.Guarded`` (``step_timeout``: a reset or step that hangs ends, one that
    fails is an ``EnvError`` naming the env); with ``config.steps=0`` only ``CONTEXT_PROBES`` of them,
    to size the model's context.
    """
    from lmgym.vector import Guarded

    config = config or WarmStartConfig()
    env_kwargs = dict(env_kwargs or {})
    key, path = cache_entry(env_id, env_kwargs, config)
    tokenizer = ByteTokenizer(env_special_tokens(env_id, env_kwargs))
    if use_cache and path.exists():
        from transformers import AutoModelForCausalLM

        try:
            if find_damaged(path) is None:
                return AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False), tokenizer, path
        except Exception:  # noqa: BLE001 (whatever is wrong with it, the entry is rebuilt)
            pass
        print(f"the cached warm start in {path} is unreadable: rebuilding it")

    def make() -> gym.Env:
        return gym.make(env_id, tokenizer=tokenizer, **env_kwargs)

    env = Guarded(make(), factory=make, step_timeout=step_timeout)
    # never more demonstrations than the steps draw (an env's long episodes make each one dear)
    n = min(config.demonstrations, config.steps * config.batch_size if config.steps else CONTEXT_PROBES)
    try:
        demos = demonstrations(env, n, tokenizer, config.tool_rate, config.seed, seconds=WARMSTART_MINUTES * 60 / 3)
    finally:
        close_within(env)
    torch.manual_seed(config.seed)
    build = tiny_llama if config.architecture == "llama" else tiny_gpt2
    model = build(tokenizer, config.n_layer, config.n_embd, config.n_head, context_for(demos, config))
    # episodes longer than the default context (a text world's tens of turns): fewer a step, same tokens
    mean = sum(len(d.tokens) for d in demos) / max(1, len(demos))
    batch = max(1, min(config.batch_size, int(config.batch_size * config.n_positions / max(mean, 1))))
    seconds = WARMSTART_MINUTES * 60
    supervised_finetune(model, demos, config.steps, batch, config.learning_rate, config.seed, seconds=seconds)
    # the model returned is the one a later run loads (attention implementation, config defaults),
    # so that a run that built the warm start and one that found it cached are the same run
    with tempfile.TemporaryDirectory() as scratch:
        with written_aside(path if use_cache else Path(scratch) / "model") as tmp:  # a kill leaves no half entry
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "warmstart.json").write_text(key)
        from transformers import AutoModelForCausalLM

        saved = path if use_cache else Path(scratch) / "model"
        return AutoModelForCausalLM.from_pretrained(saved, trust_remote_code=False), tokenizer, path


def warm_start(
    model: PreTrainedModel,
    tokenizer: Tokenizer,
    env: gym.Env,
    steps: int,
    lora: dict[str, Any] | None = None,
    batch_size: int = 8,
    learning_rate: float | None = None,
    num_demonstrations: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[PreTrainedModel, list[float]]:
    """A supervised warm start of any causal LM on ``env``'s oracle demonstrations, before RL.

    Make ``env`` as the RL phase makes it (the same wrappers: ``ChatTemplate``, its system
    message) with ``tokenizer``: each demonstration is then the token stream an RL episode of
    those actions would be (env text encoded as the env gives it, the template's end-of-turn
    where the env writes it). Full fine-tuning, or, with ``lora`` (a spec as for
    ``PPOConfig.peft_config``), adapters trained and then merged into the weights, so the RL
    phase and its KL reference both start from the warm-started model.

    Returns the model and the loss of each step.
    """
    from lmgym.agents.models import apply_lora

    check_model_vocab(model, as_tokenizer(tokenizer))
    n = num_demonstrations or max(256, min(4000, steps * batch_size))
    demos = demonstrations(env, n, tokenizer, seed=seed)
    if lora:
        model = apply_lora(model, lora)
    rate = learning_rate or (3e-4 if lora else 3e-5)
    losses = supervised_finetune(model, demos, steps, batch_size, rate, seed, progress)
    if lora:
        model = model.merge_and_unload()  # type: ignore[operator]
    return model, losses


def context_for(demos: list[Episode], config: WarmStartConfig) -> int:
    """Positions for the default model: ``config.n_positions``, or, for an env whose episodes are
    longer (a game's long rules, many turns), twice the longest demonstration, rounded up to 64:
    room for the longer episodes of a policy that is still learning. Rotary positions cost
    nothing to extend; a learned-position GPT-2 keeps ``n_positions``."""
    longest = max((len(d.tokens) for d in demos), default=0)
    if config.architecture != "llama" or 2 * longest <= config.n_positions:
        return config.n_positions
    return -(-2 * longest // 64) * 64


def load_for_env(
    name_or_path: str | os.PathLike,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    add_special_tokens: bool = False,
) -> tuple[PreTrainedModel, Tokenizer]:
    """A model and its tokenizer from a name or path (a directory of LoRA adapters saved by lmgym
    loads its base too).

    The env's markup tags stay plain text, as they would for a real model, unless
    ``add_special_tokens``: then an HF tokenizer gets the tags it lacks through ``add_tokens``
    and the model's embeddings are resized to match. An lmgym ``ByteTokenizer`` saved with the
    model is used as it is.
    """
    from lmgym.agents.models import load_model
    from lmgym.tokenizers import HFTokenizer, load_tokenizer

    model = load_model(name_or_path)
    tokenizer = load_tokenizer(name_or_path)
    if isinstance(tokenizer, HFTokenizer):
        if add_special_tokens:
            vocab = tokenizer.hf.get_vocab()
            missing = [t for t in env_special_tokens(env_id, env_kwargs) if t not in vocab]
            if missing:
                tokenizer.hf.add_tokens(missing)
        if tokenizer.hf.pad_token is None:
            tokenizer.hf.pad_token = tokenizer.hf.eos_token
        embeddings: Any = model.get_input_embeddings()
        if add_special_tokens and embeddings.num_embeddings < tokenizer.vocab_size:
            model.resize_token_embeddings(tokenizer.vocab_size)
    return model, tokenizer
