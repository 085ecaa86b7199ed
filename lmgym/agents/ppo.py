"""PPOAgent: token-level PPO for Hugging Face causal LMs on lmgym (Gymnasium) episodes.

The loop, top to bottom::

    collect(envs, n)   episodes as token streams (every model call of every turn), played by the
                       agent's RolloutCollector through its engine, then scored with old
                       log-probs, reference log-probs and values
    update(batch)      compute_rewards -> compute_advantages -> PPO epochs over minibatches
    learn(envs, N)     collect/update until N episodes, with progress, metrics, checkpoints
    step(q, r, s, m)   the classic step-wise entry for hand-written loops

Every stage is a method a subclass can override (``generate``, ``compute_rewards``,
``compute_advantages``, ``loss``), and each is usable on its own. Playing episodes is
``lmgym.agents.rollout``'s, saving and loading ``lmgym.agents.persistence``'s, and what ``learn``
does around an update ``lmgym.agents.callbacks``'.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from gymnasium.vector import VectorEnv
from transformers import PreTrainedModel

from lmgym.agents import persistence, scoring
from lmgym.agents.advantages import (
    explained_variance,
    gae,
    grpo_advantages,
    loss_inputs,
    rloo_advantages,
    whiten,
)
from lmgym.agents.callbacks import Callback, fire, run_callbacks
from lmgym.agents.config import PPOConfig
from lmgym.agents.defaults import default_agent
from lmgym.agents.engines import Engine, EnginePolicy, Generation, make_engine
from lmgym.agents.kl import KLController
from lmgym.agents.models import adamw, load_model, memory_estimate, prepare_model, reference_model, shard
from lmgym.agents.overlap import batch_size, overlapped_batches
from lmgym.agents.policy import PolicyWithValue, action_logprobs, state_values
from lmgym.agents.rollout import EVAL_SEED_OFFSET, RolloutCollector, as_vector_env
from lmgym.agents.trajectories import Episode, Trajectories


class PPOAgent:
    """Trains a causal LM with PPO on Gymnasium envs whose actions are token sequences.

    Args:
        model: an ``AutoModelForCausalLM`` instance, or a name or local path to load one from.
        tokenizer: HF tokenizer, lmgym tokenizer, protocol object, or name/path; ``None`` loads
            it from the model's path.
        ref_model: the KL reference; ``None`` makes a frozen copy of ``model`` (for a PEFT model,
            the base with adapters disabled).
        config: a ``PPOConfig``.

    Example:
        >>> import gymnasium as gym, lmgym
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> model = GPT2LMHeadModel(GPT2Config(vocab_size=258, n_embd=32, n_layer=1, n_head=2))
        >>> agent = PPOAgent(model, tokenizer=lmgym.ByteTokenizer(), config=PPOConfig(seed=0))
        >>> batch = agent.collect(gym.make("lmgym/Echo-v0"), num_episodes=2)
        >>> len(batch), sorted(agent.update(batch))[:2]
        (2, ['advantages/raw_std', 'env/action_tokens'])
    """

    def __init__(
        self,
        model: PreTrainedModel | str | os.PathLike,
        tokenizer: Any = None,
        ref_model: PreTrainedModel | None = None,
        config: PPOConfig | None = None,
    ):
        self.config = config or PPOConfig()
        self.accelerator = Accelerator(
            mixed_precision=self.config.model.mixed_precision,
            gradient_accumulation_steps=self.config.gradient_accumulation_steps,
        )
        set_seed(self.config.seed + self.accelerator.process_index)
        model, self.tokenizer = prepare_model(model, tokenizer, self.config.model)
        self.is_peft = hasattr(model, "disable_adapter") and ref_model is None
        self.ref_model = None if self.is_peft else reference_model(model, ref_model, self.accelerator.device)
        policy = PolicyWithValue(model)
        sharded = self.config.model.fsdp and self.accelerator.num_processes > 1
        if self.config.model.fsdp and not sharded:
            warnings.warn(
                "fsdp=True in one process: the policy is not sharded (FSDP2 needs several: accelerate "
                "launch or torchrun)",
                stacklevel=2,
            )
        if sharded:  # FSDP2 in place; accelerate prepares the optimizer only
            shard(policy, self.accelerator.device, self.accelerator.num_processes)
        optimizer = adamw([p for p in policy.parameters() if p.requires_grad], self.config.learning_rate)
        if sharded:
            self.policy, self.optimizer = policy, self.accelerator.prepare(optimizer)
        else:
            self.policy, self.optimizer = self.accelerator.prepare(policy, optimizer)
        engine = make_engine(self.config.engine.name, self.engine_policy(), **self.config.engine.arguments)
        limit = getattr(model.config, "max_position_embeddings", None) or 2048
        self.rollout = RolloutCollector(
            engine, self.tokenizer, self.config, limit, generate=self.generate, rank=self.accelerator.process_index
        )
        self.kl_controller = KLController(
            self.config.kl_coef, self.config.adaptive_kl, self.config.kl_target, self.config.kl_horizon
        )
        self.num_episodes = 0
        self.num_updates = 0  # also the policy's version: the engine samples with ``engine_version``
        self.engine_version = 0
        self.overlapping = False  # learn's overlapped update: the engine is synced between updates, not in them

    default = classmethod(default_agent)

    # ----------------------------------------------------------------------------- the model
    @property
    def model(self) -> PreTrainedModel:
        """The causal LM being trained (unwrapped from accelerate)."""
        return self.accelerator.unwrap_model(self.policy).model

    @property
    def value_head(self) -> torch.nn.Linear:
        return self.accelerator.unwrap_model(self.policy).value_head

    @property
    def engine(self) -> Engine:
        """The rollout engine (``lmgym.agents.engines``); assign one to replace it."""
        return self.rollout.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.rollout.engine = engine

    @functools.cached_property
    def tokens_fingerprint(self) -> str:
        """SHA-256 of every token's text: what a checkpoint's tokenizer must match (decoded once)."""
        return persistence.tokens_fingerprint(self.tokenizer)

    @property
    def max_context_tokens(self) -> int:
        return self.rollout.max_context_tokens

    def engine_policy(self) -> EnginePolicy:
        """What the rollout engine generates with: the policy, its tokenizer and sampling settings."""
        config = self.config
        return EnginePolicy(
            self.accelerator.unwrap_model(self.policy),
            self.tokenizer,
            lambda: config.rollout.sampling_kwargs,
            self.accelerator.device,
            config.seed,
        )

    def close(self) -> None:
        """Stops the rollout engine's processes, if it has any (vLLM's); the agent can still be saved."""
        self.engine.close()

    # ------------------------------------------------------------------------------- collect
    def collect(
        self,
        envs: gym.Env | VectorEnv,
        num_episodes: int,
        group_size: int | None = None,
        seeds: Sequence[int] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        score: bool = True,
    ) -> Trajectories:
        """Runs ``num_episodes`` episodes (``RolloutCollector.collect``, which says what each
        argument does) and returns them, scored unless ``score=False``: old and reference
        log-probs and values, which ``update`` needs and an evaluation does not."""
        version = self.engine_version
        batch = self.rollout.collect(envs, num_episodes, group_size, seeds, generation_kwargs)
        for e in batch:
            e.versions = torch.where(e.action_mask, version, -1)  # the weights that sampled each token
        if score:
            self.score(batch)
        return batch

    def generate(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]:
        """One turn for each context through the rollout engine: the sampled ids (each a
        ``Generation``, a list with the sampler's log-probs and, from the HF engine, values),
        each turn ended by EOS, a stop string or ``max_new_tokens``. ``config.rollout.
        generation_kwargs`` apply, and ``generation_kwargs`` override them for this call; ``keys``
        (one per context, from ``collect``) give each row its own random stream. Override it to
        generate otherwise: returning plain lists of ids is fine (they are scored afterwards)."""
        return self.engine.generate(contexts, stop_strings, max_new_tokens, keys=keys, **generation_kwargs)

    def env_contract(self, envs: gym.Env | VectorEnv) -> dict[str, Any]:
        """The env's stop strings, turn budget and autoreset mode (``RolloutCollector.env_contract``)."""
        return self.rollout.env_contract(as_vector_env(envs))

    # --------------------------------------------------------------------------------- score
    score = scoring.score
    ref_logits = scoring.ref_logits

    # -------------------------------------------------------------------------- advantages
    def compute_rewards(self, episode: Episode) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token rewards (T,): each turn's reward on its last action token, minus the k1 KL
        penalty on every action token when ``kl_penalty == "reward"``. Also returns the k1 KL (T,)."""
        assert episode.logprobs is not None and episode.ref_logprobs is not None
        kl = torch.where(episode.action_mask, episode.logprobs - episode.ref_logprobs, 0.0)  # (T,)
        rewards = torch.zeros(episode.length)
        rewards[episode.turn_ends] += torch.tensor(episode.rewards, dtype=torch.float32)
        if self.config.kl_penalty == "reward":
            rewards -= self.kl_controller.value * kl
        return rewards, kl

    def compute_advantages(self, batch: Trajectories) -> dict[str, Any]:
        """Advantages and returns (T,) per episode, by ``config.estimator``; whitened across the
        batch's action tokens. Environment tokens get 0 and no loss."""
        cfg = self.config
        rewards, kls = zip(*(self.compute_rewards(e) for e in batch))
        advantages, returns = [], []
        if cfg.estimator == "gae":
            for e, r in zip(batch, rewards):
                mask = e.action_mask
                assert e.values is not None, "score() fills the values"
                bootstrap = e.bootstrap_value if e.truncated else 0.0
                adv, ret = gae(r[mask], e.values[mask], bootstrap, cfg.gamma, cfg.gae_lambda)
                advantages.append(torch.zeros(e.length).masked_scatter(mask, adv))
                returns.append(torch.zeros(e.length).masked_scatter(mask, ret))
        else:
            totals = torch.stack([r.sum() for r in rewards])  # (N,) episode returns, KL included
            estimate = rloo_advantages if cfg.estimator == "rloo" else grpo_advantages
            per_episode = estimate(totals, [e.group for e in batch])
            for e, a in zip(batch, per_episode):
                advantages.append(torch.where(e.action_mask, a, 0.0))
                returns.append(torch.where(e.action_mask, totals.new_tensor(float(a)), 0.0))
        flat, mask = torch.cat(advantages), torch.cat([e.action_mask for e in batch])
        raw_std = float(flat[mask].std(unbiased=False)) if mask.any() else 0.0
        if cfg.whiten_advantages:
            advantages = list(whiten(flat, mask, cfg.whiten_min_std).split([e.length for e in batch]))
        kl_per_episode = torch.stack([k.sum() for k in kls])
        return {"advantages": advantages, "returns": returns, "kl": kl_per_episode, "raw_std": raw_std}

    # -------------------------------------------------------------------------------- update
    def update(self, batch: Trajectories) -> dict[str, float]:
        """One PPO update on a batch of episodes; returns the metrics as a ``/``-namespaced dict."""
        if len(batch) == 0:
            raise ValueError("update needs at least one episode")
        cfg, start, device = self.config, time.perf_counter(), self.accelerator.device
        self.refresh_stale(batch)
        self.score(batch)
        self.init_value_head(batch)
        targets = self.compute_advantages(batch)
        for e, adv in zip(batch, targets["advantages"]):
            e.advantages = adv  # kept for the viewer (lmgym view)
        padded = loss_inputs(batch, targets, self.config.tis_cap, self.accelerator.device)  # (N, T) each, once
        lengths = torch.tensor([e.length for e in batch])
        stats: dict[str, list[float]] = {}
        self.policy.train()
        for _ in range(cfg.n_epochs):
            order = torch.randperm(len(batch))
            for lo in range(0, len(batch), cfg.mini_batch_size):
                rows = order[lo : lo + cfg.mini_batch_size]
                width = int(lengths[rows].max())
                minibatch = {k: v[rows.to(device), :width] for k, v in padded.items()}
                with self.accelerator.accumulate(self.policy):
                    loss, mb_stats = self.loss(minibatch)
                    self.accelerator.backward(loss)
                    if self.accelerator.sync_gradients:
                        self.accelerator.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                for key, value in mb_stats.items():
                    stats.setdefault(key, []).append(value)
        mean_kl = float(self.accelerator.gather(targets["kl"].to(device)).mean())
        self.kl_controller.update(mean_kl, len(batch))
        metrics = {key: float(np.mean(values)) for key, values in stats.items()}
        metrics.update(batch.stats())
        metrics.update(
            {
                "advantages/raw_std": targets["raw_std"],  # the signal's scale before whitening
                "objective/kl": mean_kl,
                "objective/kl_coef": self.kl_controller.value,
                "optim/learning_rate": self.optimizer.param_groups[0]["lr"],
                "time/update": time.perf_counter() - start,
            }
        )
        if cfg.estimator == "gae":
            metrics["value/explained_variance"] = explained_variance(batch, targets["returns"])
        self.num_updates += 1
        if not self.overlapping:
            self.sync_engine()
        return metrics

    def sync_engine(self) -> None:
        """Pushes the policy's weights to the rollout engine (after an update)."""
        self.engine.sync_weights()
        self.engine_version = self.num_updates

    def refresh_stale(self, batch: Trajectories) -> None:
        """Episodes sampled by an older policy (the overlapped update's): their log-probs become
        the sampler's, for the importance weights, and ``score`` computes the current policy's.
        An episode more than ``max_staleness`` versions old is refused."""
        for e in batch:
            if e.versions is None or not e.action_mask.any():
                continue
            age = self.num_updates - int(e.versions[e.action_mask].min())
            if age > self.config.rollout.max_staleness:
                raise ValueError(
                    f"an episode sampled {age} updates ago, more than max_staleness={self.config.rollout.max_staleness}"
                )
            if age > 0 and e.logprobs is not None:
                e.sampler_logprobs = e.sampler_logprobs if e.sampler_logprobs is not None else e.logprobs
                e.logprobs = e.values = None

    @torch.no_grad()
    def init_value_head(self, batch: Trajectories) -> None:
        """An untrained value head (all zeros) starts at the batch's mean return, and the batch's
        values with it. From 0, GAE's advantages (lambda < 1) decay back from each reward, and
        whitening then makes the early tokens of successful episodes negative: a solved task
        (spell_backward at 99.5%) fell to 0% in two updates. From the mean return, the advantages
        of a batch that all succeeded are about 0."""
        head = self.value_head
        if self.config.estimator != "gae" or head.weight.any() or head.bias.any():
            return
        returns = torch.tensor(batch.returns, dtype=torch.float32, device=self.accelerator.device)
        mean = float(self.accelerator.gather(returns).mean())  # every rank the same bias
        policy = self.accelerator.unwrap_model(self.policy)
        if hasattr(policy, "reshard"):  # FSDP2: write the sharded parameter, not a gathered copy
            policy.reshard()
        head.bias.fill_(mean)
        for e in batch:
            assert e.values is not None, "score() fills the values"
            e.values = torch.where(e.action_mask, e.values + mean, 0.0)
            e.bootstrap_value += mean

    def loss(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """The clipped PPO loss on a minibatch (B, T); token-level means over action tokens."""
        cfg, mask = self.config, mb["action_mask"]
        logits, values = self.policy(mb["tokens"], mb["attention_mask"], mask)  # (N, V): action tokens only
        logp_all, logprobs = action_logprobs(logits, mb["tokens"], mask, cfg.rollout.temperature)  # (N, V), (B, T)
        values = state_values(values)  # (B, T)
        n = mask.sum().clamp(min=1)

        def masked_mean(x: torch.Tensor) -> torch.Tensor:
            return torch.where(mask, x, 0.0).sum() / n

        log_ratio = torch.where(mask, logprobs - mb["old_logprobs"], 0.0)
        ratio = log_ratio.exp()
        adv = mb["advantages"]
        pg_losses = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range))  # (B, T)
        if "is_weights" in mb:
            pg_losses = pg_losses * mb["is_weights"]
        pg_loss = masked_mean(pg_losses)
        v_loss_unclipped = (values - mb["returns"]) ** 2
        if cfg.clip_range_vf is not None:
            v_clipped = mb["old_values"] + (values - mb["old_values"]).clamp(-cfg.clip_range_vf, cfg.clip_range_vf)
            v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, (v_clipped - mb["returns"]) ** 2))
        else:
            v_loss = 0.5 * masked_mean(v_loss_unclipped)
        with torch.set_grad_enabled(cfg.ent_coef != 0):  # a metric only, unless it is in the loss
            entropy = -(logp_all.exp() * logp_all).sum(-1).sum() / n  # over the action tokens
        vf_coef = cfg.vf_coef if cfg.estimator == "gae" else 0.0  # critic-free: the head idles
        loss = pg_loss + vf_coef * v_loss
        if cfg.ent_coef:
            loss = loss - cfg.ent_coef * entropy
        stats = {}
        if cfg.kl_penalty == "loss":  # k3 estimator (Schulman 2020), as in GRPO
            log_ref_ratio = torch.where(mask, mb["ref_logprobs"] - logprobs, 0.0)
            kl_k3 = masked_mean(log_ref_ratio.exp() - log_ref_ratio - 1)
            loss = loss + self.kl_controller.value * kl_k3
            stats["loss/kl"] = float(kl_k3.detach())
        with torch.no_grad():
            stats.update(
                {
                    "loss/policy": float(pg_loss),
                    "loss/value": float(v_loss),
                    "loss/total": float(loss),
                    "policy/entropy": float(entropy),
                    "policy/approx_kl": float(masked_mean((ratio - 1) - log_ratio)),
                    "policy/clipfrac": float(masked_mean(((ratio - 1).abs() > cfg.clip_range).float())),
                }
            )
        return loss, stats

    # ---------------------------------------------------------------------------------- step
    def step(
        self,
        queries: Sequence[torch.Tensor],
        responses: Sequence[torch.Tensor],
        rewards: Sequence[float] | torch.Tensor,
        response_masks: Sequence[torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """One PPO update on hand-made samples (the classic TRL <= 0.11 entry point).

        Args:
            queries: 1-D token tensors, the contexts.
            responses: 1-D token tensors the model generated after each query.
            rewards: one scalar per sample; it sits on the last unmasked response token.
            response_masks: 1-D 0/1 tensors per response, 0 marking text the model did not
                write (a tool's output inside the response): context only, no loss, and GAE
                carries the bootstrap across it.
        """
        return self.update(Trajectories.from_samples(queries, responses, rewards, response_masks, self.tokenizer))

    # --------------------------------------------------------------------------------- learn
    def learn(
        self,
        envs: gym.Env | VectorEnv,
        total_episodes: int,
        callbacks: Iterable[Callback] = (),
        log_dir: str | os.PathLike | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume_from: str | os.PathLike | None = None,
        progress_bar: bool = True,
    ) -> PPOAgent:
        """Collects and updates until ``total_episodes`` episodes have been trained on.

        ``callbacks`` (``lmgym.agents.callbacks``): plain callables ``cb(agent, metrics)`` called
        after every update, or objects with any of ``on_collect(agent, batch)``,
        ``on_update(agent, metrics)`` and ``on_checkpoint(agent, path)``; returning ``False``
        stops training. Metrics go to ``log_dir`` (``metrics.csv``, and TensorBoard when
        installed); checkpoints to ``checkpoint_dir`` every ``config.run.checkpoint_every``
        updates and at the end; ``resume_from`` continues a checkpoint.
        """
        if total_episodes < 1:
            raise ValueError(f"total_episodes must be >= 1, got {total_episodes}")
        callbacks = list(callbacks)
        if resume_from is not None:
            resumed = self.load_training_state(resume_from, envs)
            if self.accelerator.is_main_process:
                print(f"resumed from {resumed} (update {self.num_updates}, {self.num_episodes} episodes)")
        own = run_callbacks(self, envs, total_episodes, callbacks, log_dir, checkpoint_dir, progress_bar)
        overlapped = self.config.rollout.overlap_update
        batches = overlapped_batches(self, envs, total_episodes) if overlapped else self.batches(envs, total_episodes)
        try:
            for batch, collect_time in batches:
                if not self.learn_step(batch, collect_time, total_episodes, callbacks, own):
                    break
        finally:  # metrics written so far are flushed, the bar closed, even when an env fails
            for cb in own:
                cb.close()
        return self

    def batches(self, envs: gym.Env | VectorEnv, total_episodes: int) -> Iterator[tuple[Trajectories, float]]:
        """``learn``'s batches, each collected when the update before it is done, with its seconds
        (``overlapped_batches`` collects the next during the update)."""
        while self.num_episodes < total_episodes:
            started = time.perf_counter()
            batch = self.collect(envs, batch_size(self, total_episodes, self.num_episodes))
            yield batch, time.perf_counter() - started

    def learn_step(self, batch: Trajectories, collect_time: float, total: int, callbacks: list, own: list) -> bool:
        """One update of ``learn`` on ``batch``, with the callbacks; ``False`` when one says stop."""
        if fire(callbacks, "on_collect", self, batch) is False:
            return False
        self.anneal_learning_rate(total)
        metrics = self.update(batch)
        self.num_episodes += len(batch)
        metrics.update({"time/collect": collect_time, "env/episodes": self.num_episodes})
        stop = fire(callbacks, "on_update", self, metrics) is False  # a callback may add metrics
        for cb in own:
            cb.after_update(self, batch, metrics, last=stop or self.num_episodes >= total)
        return not stop

    def anneal_learning_rate(self, total_episodes: int) -> None:
        """CleanRL's linear schedule to 0 by episodes done, when ``config.anneal_lr``."""
        if self.config.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.learning_rate * (1 - self.num_episodes / total_episodes)

    # ---------------------------------------------------------------------- save and load
    save = persistence.save
    save_checkpoint = persistence.save_checkpoint
    load = classmethod(persistence.load)
    load_training_state = persistence.load_training_state

    def memory_estimate(self) -> dict[str, float]:
        """Bytes before activations (``lmgym.agents.models.memory_estimate``)."""
        trainable = sum(p.numel() for p in self.policy.parameters() if p.requires_grad)
        return memory_estimate(self.model, trainable, self.ref_model)


__all__ = ["EVAL_SEED_OFFSET", "PPOAgent", "as_vector_env", "load_model"]  # load_model: lmgym.agents.models
