"""PPOAgent: token-level PPO for Hugging Face causal LMs on lmgym (Gymnasium) episodes.

``collect`` plays episodes through the agent's ``RolloutCollector`` and its engine (every model
call of every turn, as token streams) and scores them (its ``Scorer``); ``update`` turns a batch
into rewards, advantages and PPO epochs; ``learn`` loops the two; ``step`` is the classic entry
for hand-written loops. Each stage is a method to call or override (``compute_rewards``,
``compute_advantages``, ``loss``, ``ref_logits``); how tokens are sampled is the engine's
(``agent.engine``: wrap or replace it). The agent's state is plain data (``state_dict``), and the
modules it uses take parts, never the agent.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from gymnasium.vector import VectorEnv
from transformers import PreTrainedModel

from lmgym.agents import loss as ppo_loss
from lmgym.agents import persistence
from lmgym.agents.advantages import episode_advantages, whiten
from lmgym.agents.batch import UpdateBatch
from lmgym.agents.callbacks import CallbackLike, fire, run_callbacks
from lmgym.agents.checkpoints import fitting, model_signature
from lmgym.agents.config import PPOConfig
from lmgym.agents.engines import Engine, EnginePolicy, make_engine
from lmgym.agents.kl import KLController, past_target_kl
from lmgym.agents.loss import LossInputs
from lmgym.agents.models import (
    load_model,
    memory_estimate,
    place,
    prepare_model,
    reference_model,
)
from lmgym.agents.overlap import Batches, batch_sizes, overlapped
from lmgym.agents.policy import PolicyWithValue, action_logits, action_logprobs, state_values
from lmgym.agents.rewards import token_rewards, trained_rewards
from lmgym.agents.rollout import EVAL_SEED_OFFSET, EnvContract, RolloutCollector, as_vector_env, env_id_of
from lmgym.agents.scoring import Scorer
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
        self.config = config = config or PPOConfig()
        steps = config.gradient_accumulation_steps
        self.accelerator = Accelerator(mixed_precision=config.model.mixed_precision, gradient_accumulation_steps=steps)
        set_seed(config.seed + self.accelerator.process_index)
        model, self.tokenizer = prepare_model(model, tokenizer, config.model)
        model.zero_grad(set_to_none=True)  # gradients the model arrives with (a warm start's) are not this run's
        self.is_peft = hasattr(model, "disable_adapter")  # saved as its adapters and the name of their base
        own_reference = ref_model is not None or not self.is_peft  # else the base with the adapters off
        self.ref_model = reference_model(model, ref_model, self.accelerator.device) if own_reference else None
        self.policy, self.optimizer = place(PolicyWithValue(model), self.accelerator, config)
        device, rollout = self.accelerator.device, config.rollout
        module = self.accelerator.unwrap_model(self.policy)
        sampling = EnginePolicy(module, self.tokenizer, lambda: rollout.sampling_kwargs, device, config.seed)
        engine = make_engine(config.engine.name, sampling, **config.engine.arguments)
        limit = getattr(model.config, "max_position_embeddings", None) or 2048
        group, rank = config.group_size or 1, self.accelerator.process_index
        self.rollout = RolloutCollector(engine, self.tokenizer, rollout, limit, group, config.seed, rank)
        pad, batch = self.tokenizer.pad_token_id, config.model.forward_batch_size
        self.scorer = Scorer(self.policy, self.ref_logits, pad, lambda: rollout.temperature, batch, device)
        self.kl_controller = KLController(config.kl_coef, config.adaptive_kl, config.kl_target, config.kl_horizon)
        self.num_episodes = 0
        self.num_updates = 0  # also the policy's version: the engine samples with ``engine_version``
        self.collect_began: dict[str, Any] | None = None  # the RNGs as the collect in progress found them
        self.engine_version = 0
        self.last_update: UpdateBatch | None = None  # what the last update trained with (for lmgym view)

    @classmethod
    def default(cls, env_id: str = "lmgym/Calculator-v0", **kwargs: Any) -> PPOAgent:
        """The agent ``lmgym train ENV_ID`` trains with no ``--model`` (``lmgym.agents.defaults.default_agent``)."""
        from lmgym.agents.defaults import default_agent

        model, tokenizer, config = default_agent(env_id, **kwargs)
        return cls(model, tokenizer=tokenizer, config=config)

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
        """The rollout engine (``lmgym.agents.engines``): the one door for how tokens are sampled;
        assign one (a wrapper of it, say) to sample otherwise."""
        return self.rollout.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self.rollout.engine = engine

    @functools.cached_property
    def tokens_fingerprint(self) -> str:
        """SHA-256 of every token's text: what a checkpoint's tokenizer must match (decoded once)."""
        return persistence.tokens_fingerprint(self.tokenizer)

    def sync_engine(self) -> None:
        """Pushes the policy's weights to the rollout engine (``learn`` does after each update)."""
        self.engine.sync_weights()
        self.engine_version = self.num_updates

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
        keys: Sequence[int] | None = None,
    ) -> Trajectories:
        """Runs ``num_episodes`` episodes (``RolloutCollector.collect``, which says what each
        argument does) with the policy as it is (an engine behind the last update is synced
        first) and returns them as played: ``update`` scores what it trains on."""
        if self.engine_version != self.num_updates:
            self.sync_engine()
        k = group_size or self.config.group_size
        return self.rollout.collect(envs, num_episodes, k, seeds, generation_kwargs, self.engine_version, keys)

    def env_contract(self, envs: gym.Env | VectorEnv) -> EnvContract:
        """The env's stop strings, turn budget and autoreset mode (``RolloutCollector.env_contract``)."""
        return self.rollout.env_contract(envs)

    # --------------------------------------------------------------------------------- score
    def score(self, episodes: Iterable[Episode]) -> None:
        """Fills each episode's old and reference log-probs and values (``Scorer``), anew for one
        an older policy sampled; the reference forward is skipped while the KL term is off
        (``kl_coef=0``, not adaptive), and a truncated episode's bootstrap value unless GAE reads it."""
        cfg, kl_on = self.config, self.kl_controller.value != 0 or self.config.adaptive_kl
        self.scorer(episodes, kl_on, self.num_updates, cfg.rollout.max_staleness, cfg.estimator == "gae")

    def ref_logits(self, tokens: torch.Tensor, attention: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The reference model's logits (N, V) that predict the action tokens (a PEFT policy's base
        with its adapters off)."""
        gather = self.accelerator.unwrap_model(self.policy).head_on_hidden
        if self.ref_model is not None:
            return action_logits(self.ref_model, tokens, attention, actions, gather)[0]
        model: Any = self.model  # a PeftModel
        with model.disable_adapter():
            return action_logits(model, tokens, attention, actions, gather)[0]

    # -------------------------------------------------------------------------- advantages
    def compute_rewards(self, batch: Trajectories) -> tuple[list[list[float]], list[torch.Tensor], torch.Tensor]:
        """The rewards the update trains on: each episode's turn rewards after ``config.credit`` and
        ``config.reward_control`` (the shuffle seeded by the seed and the update), laid on their
        turns' last tokens (T,) minus the k1 KL penalty when ``kl_penalty == "reward"``; and each
        episode's k1 KL (N,), summed over its action tokens."""
        cfg = self.config
        turns = trained_rewards(batch.episodes, cfg.credit, cfg.reward_control, seed=[cfg.seed, self.num_updates])
        coef = self.kl_controller.value if cfg.kl_penalty == "reward" else 0.0
        assert all(e.scored for e in batch), "score() fills the log-probs"
        kls = [torch.where(e.action_mask, e.logprobs - e.ref_logprobs, 0.0) for e in batch]  # type: ignore[operator]
        rewards = [token_rewards(e, r, kl, coef) for e, r, kl in zip(batch, turns, kls)]
        return turns, rewards, torch.stack([k.sum() for k in kls])

    def compute_advantages(
        self,
        batch: Trajectories,
        rewards: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        bootstraps: Sequence[float],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], float]:
        """Advantages and returns (T,) per episode from per-token ``rewards`` and ``values``, by
        ``config.estimator`` (``scale_rewards`` for the group ones), whitened across the batch's
        action tokens when configured; and their spread before whitening. Environment tokens get
        0 and no loss."""
        cfg = self.config
        advantages, returns = episode_advantages(
            rewards, values, bootstraps, batch.episodes, cfg.estimator, cfg.gamma, cfg.gae_lambda, cfg.scale_rewards
        )
        flat, mask = torch.cat(advantages), torch.cat([e.action_mask for e in batch])
        raw_std = float(flat[mask].std(unbiased=False)) if mask.any() else 0.0
        if cfg.whiten_advantages:
            advantages = list(whiten(flat, mask, cfg.whiten_min_std).split([e.length for e in batch]))
        return advantages, returns, raw_std

    def derive(self, batch: Trajectories, value_shift: float = 0.0) -> UpdateBatch:
        """What an update trains ``batch`` with: scores, then rewards, then advantages, in an
        ``UpdateBatch`` of its own (the episodes are not edited past their scores); ``value_shift``
        is added to the scored values (``init_value_head``'s)."""
        if not all(e.scored for e in batch):  # update scored it already, before the value head moved
            self.score(batch)
        shift = value_shift
        values = [torch.where(e.action_mask, e.values + shift, 0.0) for e in batch]  # type: ignore[operator]
        bootstraps = [e.bootstrap_value + shift for e in batch]
        turns, rewards, kl = self.compute_rewards(batch)
        advantages, returns, raw_std = self.compute_advantages(batch, rewards, values, bootstraps)
        return UpdateBatch(batch.episodes, values, bootstraps, turns, rewards, kl, advantages, returns, raw_std)

    # -------------------------------------------------------------------------------- update
    def update(self, batch: Trajectories) -> dict[str, float]:
        """One PPO update on a batch of episodes: batch in, metrics (a ``/``-namespaced dict) out.
        Scores, rewards and advantages (``derive``), then ``n_epochs`` over shuffled minibatches.
        The engine is not synced here: ``learn`` does it after each update (``sync_engine``), and
        ``collect`` does when the engine is behind."""
        if len(batch) == 0:
            raise ValueError("update needs at least one episode")
        cfg, start, device = self.config, time.perf_counter(), self.accelerator.device
        self.score(batch)
        self.last_update = derived = self.derive(batch, self.init_value_head(batch))
        padded = derived.loss_inputs(cfg.tis_cap, device, cfg.mask_truncated)  # (N, T) each, once
        lengths = torch.tensor([e.length for e in batch])
        stats: dict[str, list[float]] = {}
        self.policy.train()
        stopped = False
        for rows, normalizer in self.minibatches(padded, batch):
            minibatch = padded.rows(rows.to(device), int(lengths[rows].max()))._replace(normalizer=normalizer)
            with self.accelerator.accumulate(self.policy):
                loss, mb_stats = self.loss(minibatch)
                if stopped := past_target_kl(self.accelerator, mb_stats["policy/approx_kl"], cfg.target_kl):
                    self.optimizer.zero_grad()
                    break
                self.accelerator.backward(loss)
                if self.accelerator.sync_gradients:
                    self.accelerator.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad()
            for key, value in mb_stats.items():
                stats.setdefault(key, []).append(value)
        mean_kl = float(self.accelerator.gather(derived.kl.to(device)).mean())
        self.kl_controller.update(mean_kl, len(batch))
        self.num_updates += 1
        metrics = {key: float(np.mean(values)) for key, values in stats.items()} | batch.stats()
        metrics["advantages/raw_std"] = derived.raw_std  # the signal's scale before whitening
        metrics["objective/kl"], metrics["objective/kl_coef"] = mean_kl, self.kl_controller.value
        metrics["optim/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        metrics |= {"policy/stopped_at_target_kl": float(stopped)} if cfg.target_kl is not None else {}
        metrics["time/update"] = time.perf_counter() - start
        if cfg.estimator == "gae":
            metrics["value/explained_variance"] = derived.explained_variance()
        return metrics

    def minibatches(self, padded: LossInputs, batch: Trajectories) -> Iterator[tuple[torch.Tensor, float | None]]:
        """The rows of each minibatch (``n_epochs`` shuffles), each with what its policy loss's token
        sum is divided by (``ppo_loss.aggregate``): for ``dapo`` and ``cispo``, as TRL's, the policy
        tokens of the whole update batch (every process) over its optimizer steps, i.e. the mean
        step's (over the accumulation steps too, which accelerate divides by); for ``dr_grpo``, its
        rows x the turn budget x the most turns an episode took; ``None`` for the others."""
        cfg = self.config
        mask = padded.action_mask if padded.policy_mask is None else padded.policy_mask
        tokens = mask.sum(-1).float()  # (N,)
        all_rows = list(ppo_loss.minibatch_rows(len(batch), cfg.mini_batch_size, cfg.n_epochs))
        steps = cfg.gradient_accumulation_steps
        normalizer: float | None = None
        if cfg.loss_type in ("dapo", "cispo"):  # per process: accelerate's DDP averages over processes
            batch_tokens = float(self.accelerator.gather(tokens.sum()[None]).mean()) * cfg.n_epochs
            normalizer = batch_tokens / -(-len(all_rows) // steps) / steps  # over ceil(minibatches / steps)
        for rows in all_rows:
            if cfg.loss_type == "dr_grpo":
                turns = max(len(e.rewards) for e in batch)
                normalizer = len(rows) * (batch.turn_budget or max(e.num_action_tokens for e in batch)) * turns
            yield rows, normalizer

    @torch.no_grad()
    def init_value_head(self, batch: Trajectories) -> float:
        """An untrained value head (all zeros) starts at the batch's mean return; returns that
        shift (0 once the head is trained), which the update adds to the batch's values. From 0,
        GAE's advantages (lambda < 1) decay back from each reward, and whitening then makes the
        early tokens of successful episodes negative: a solved task (spell_backward at 99.5%) fell
        to 0% in two updates. From the mean return, the advantages of a batch that all succeeded
        are about 0."""
        head = self.value_head
        if self.config.estimator != "gae" or head.weight.any() or head.bias.any():
            return 0.0
        returns = torch.tensor(batch.returns, dtype=torch.float32, device=self.accelerator.device)
        mean = float(self.accelerator.gather(returns).mean())  # every rank the same bias
        policy = self.accelerator.unwrap_model(self.policy)
        if hasattr(policy, "reshard"):  # FSDP2: write the sharded parameter, not a gathered copy
            policy.reshard()
        head.bias.fill_(mean)
        return mean

    def loss(self, mb: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """The PPO loss on a minibatch (B, T): this forward pass, then the arithmetic of
        ``lmgym.agents.loss`` (the clipped surrogate by ``loss_type`` and
        ``importance_sampling_level``, the value loss, the entropy, a k3 KL term); the value loss,
        entropy and KL are token-level means over the action tokens."""
        cfg, mask = self.config, mb.action_mask
        logits, values = self.policy(mb.tokens, mb.attention_mask, mask)  # (N, V): action tokens only
        logp_all, logprobs = action_logprobs(logits, mb.tokens, mask, cfg.rollout.temperature)  # (N, V), (B, T)
        values = state_values(values)  # (B, T)
        policy_mask = mask if mb.policy_mask is None else mb.policy_mask
        pg_loss, ratio, log_ratio = ppo_loss.clipped_policy_loss(
            logprobs,
            mb.old_logprobs,
            mb.advantages,
            policy_mask,
            cfg.clip_range,
            mb.is_weights,
            cfg.clip_range_high,
            cfg.loss_type,
            cfg.importance_sampling_level,
            mb.normalizer,
        )
        v_loss = ppo_loss.value_loss(values, mb.old_values, mb.returns, mask, cfg.clip_range_vf)
        with torch.set_grad_enabled(cfg.ent_coef != 0):  # a metric only, unless it is in the loss
            entropy = -(logp_all.exp() * logp_all).sum(-1).sum() / mask.sum().clamp(min=1)  # over the action tokens
        vf_coef = cfg.vf_coef if cfg.estimator == "gae" else 0.0  # critic-free: the head idles
        loss = pg_loss + vf_coef * v_loss - cfg.ent_coef * entropy
        stats = {}
        if cfg.kl_penalty == "loss":  # k3 estimator (Schulman 2020), as in GRPO
            kl_k3 = ppo_loss.k3_kl(logprobs, mb.ref_logprobs, mask)
            loss = loss + self.kl_controller.value * kl_k3
            stats["loss/kl"] = float(kl_k3.detach())
        with torch.no_grad():
            high = cfg.clip_range if cfg.clip_range_high is None else cfg.clip_range_high
            clipped = ppo_loss.masked_mean(((ratio < 1 - cfg.clip_range) | (ratio > 1 + high)).float(), policy_mask)
            approx_kl = ppo_loss.approx_kl(ratio, log_ratio, mask)
        named = {"loss/policy": pg_loss, "loss/value": v_loss, "loss/total": loss, "policy/entropy": entropy}
        named |= {"policy/approx_kl": approx_kl, "policy/clipfrac": clipped}
        return loss, stats | {key: float(value.detach()) for key, value in named.items()}

    # ---------------------------------------------------------------------------------- step
    def step(
        self,
        queries: Sequence[torch.Tensor],
        responses: Sequence[torch.Tensor],
        rewards: Sequence[float] | torch.Tensor,
        response_masks: Sequence[torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """One PPO update on hand-made samples (the classic TRL <= 0.11 entry point), the engine
        synced after it (the next turns a loop generates come from the new weights): 1-D token
        tensors of the ``queries`` (context) and the ``responses`` the model generated after them,
        a reward per sample (on its last unmasked response token), and optional 0/1
        ``response_masks``, 0 marking text the model did not write (a tool's output inside the
        response): context only, no loss, and GAE carries the bootstrap across it."""
        metrics = self.update(Trajectories.from_samples(queries, responses, rewards, response_masks, self.tokenizer))
        self.sync_engine()
        return metrics

    # --------------------------------------------------------------------------------- learn
    def learn(
        self,
        envs: gym.Env | VectorEnv,
        total_episodes: int,
        callbacks: Iterable[CallbackLike] = (),
        log_dir: str | os.PathLike | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume_from: str | os.PathLike | None = None,
        progress_bar: bool = True,
    ) -> PPOAgent:
        """Collects and updates until ``total_episodes`` episodes have been trained on, counted
        from the agent's start (a resumed checkpoint's included): a target, not a count to add (SB3's
        ``learn`` adds), so that ``learn(envs, N, resume_from=...)`` ends where a run to N would. A
        call whose target is already reached trains nothing and says so in one line.

        ``callbacks`` (``lmgym.agents.callbacks``): plain callables ``cb(agent, metrics)`` called
        after every update, or objects with any of ``on_collect(agent, batch)``,
        ``on_update(agent, metrics)``, ``on_checkpoint(agent, path)`` and ``on_learn_end(agent,
        error)``; returning ``False`` stops training. Metrics go to ``log_dir`` (``metrics.csv``,
        and TensorBoard when installed); checkpoints to ``checkpoint_dir`` every
        ``config.run.checkpoint_every`` updates and at the end; ``resume_from`` continues a checkpoint.
        """
        if total_episodes < 1:
            raise ValueError(f"total_episodes must be >= 1, got {total_episodes}")
        user = list(callbacks)
        if resume_from is not None:
            resumed = self.load_training_state(resume_from, envs)
            if self.accelerator.is_main_process:
                print(f"resumed from {resumed} (update {self.num_updates}, {self.num_episodes} episodes)")
        if self.num_episodes >= total_episodes and self.accelerator.is_main_process:
            print(
                f"learn: nothing left to train: {self.num_episodes} episodes done, total_episodes={total_episodes} "
                "(a target counted from the start: pass a larger one)"
            )
        everything = user + run_callbacks(self, envs, total_episodes, user, log_dir, checkpoint_dir, progress_bar)
        sizes = batch_sizes(
            self.num_episodes, total_episodes, self.config.episodes_per_update, self.config.group_size or 1
        )
        overlapped = self.config.rollout.overlap_update
        error: BaseException | None = None
        try:
            for batch, seconds in self.overlapped_batches(envs, sizes) if overlapped else self.batches(envs, sizes):
                if not self.learn_step(batch, seconds, total_episodes, everything, synced=not overlapped):
                    break
        except BaseException as e:
            error = e
            raise
        finally:  # metrics written so far are flushed, the bar closed, even when an env fails
            fire(everything, "on_learn_end", self, error)
        return self

    def batches(self, envs: gym.Env | VectorEnv, sizes: Iterator[int]) -> Batches:
        """``learn``'s batches, each collected when the update before it is done, with its seconds."""
        for n in sizes:
            started, self.collect_began = time.perf_counter(), self.rng_states()
            batch = self.collect_varied(envs, n) if self.config.dynamic_sampling else self.collect(envs, n)
            self.collect_began = None
            yield batch, time.perf_counter() - started

    def rewind_collect(self) -> None:
        """Puts the RNGs back where the collect in progress began (one abandoned by an error or a
        preemption changes no weights), so that a checkpoint written now is the update's own."""
        if self.collect_began is not None:
            self.rollout.load_state_dict(self.collect_began["rollout"])
            persistence.set_rng_state(self.collect_began)
            self.collect_began = None

    def collect_varied(self, envs: gym.Env | VectorEnv, num_episodes: int) -> Trajectories:
        """DAPO's dynamic sampling (``config.dynamic_sampling``): ``num_episodes`` episodes whose
        groups did not all return the same, collecting more (at most
        ``dynamic_sampling_max_collects`` times) to replace the groups dropped; the share of groups
        dropped is ``env/dropped_groups``. Short of enough, the update trains on what it has (or
        on the last collect, when every group was dropped)."""
        k = self.config.group_size or 1
        kept: Trajectories | None = None
        collected = dropped = 0
        for _ in range(self.config.dynamic_sampling_max_collects + 1):
            need = num_episodes - (len(kept) if kept is not None else 0)
            if need <= 0:
                break
            batch = self.collect(envs, -(-need // k) * k)
            varied = batch.varied_groups()
            collected, dropped = collected + len(batch) // k, dropped + (len(batch) - len(varied)) // k
            kept = varied if kept is None else kept + varied
        assert kept is not None
        kept = kept.head(num_episodes, k) if len(kept) else batch
        kept.faults["dropped_groups"] = dropped / max(collected, 1)
        return kept

    def overlapped_batches(self, envs: gym.Env | VectorEnv, sizes: Iterator[int]) -> Batches:
        """``learn``'s batches with the overlapped update (``lmgym.agents.overlap``): each next one
        collected during the update before it, by the collector with an engine of its own, from the
        weights of the moment (``version``), unscored (``update`` scores it, in this thread)."""
        return overlapped(self.rollout, envs, sizes, self.config.group_size or 1, lambda: self.num_updates)

    def learn_step(self, batch: Trajectories, collect_time: float, total: int, callbacks: list, synced: bool) -> bool:
        """One update of ``learn`` on ``batch``, then the engine synced (``synced``; the overlapped
        update syncs its own) and the callbacks told; ``False`` when one says stop."""
        if fire(callbacks, "on_collect", self, batch) is False:
            return False
        self.anneal_learning_rate(total)
        metrics = self.update(batch)
        if synced:
            self.sync_engine()
        self.num_episodes += len(batch)
        metrics.update({"time/collect": collect_time, "env/episodes": self.num_episodes})
        return fire(callbacks, "on_update", self, metrics) is not False

    def anneal_learning_rate(self, total_episodes: int) -> None:
        """CleanRL's linear schedule to 0 by episodes done, when ``config.anneal_lr``."""
        if self.config.anneal_lr:
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.learning_rate * (1 - self.num_episodes / total_episodes)

    # ---------------------------------------------------------------------- save and load
    def state_dict(self) -> dict[str, Any]:
        """The training state as plain data: optimizer, KL coefficient, counters, the collector's
        and the global RNGs (the weights are the model's own files)."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "kl_coef": float(self.kl_controller.value),
            "num_episodes": self.num_episodes,
            "num_updates": self.num_updates,
            **self.rng_states(),
        }

    def rng_states(self) -> dict[str, Any]:
        """The collector's and the global RNGs' states: what a collect advances."""
        return {"rollout": self.rollout.state_dict(), **persistence.rng_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict``'s data (a checkpoint of an earlier release keeps its seed RNG at the top)."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_controller.value = float(state["kl_coef"])
        self.num_episodes, self.num_updates = int(state["num_episodes"]), int(state["num_updates"])
        self.rollout.load_state_dict(state.get("rollout") or {"seed_rng": state["seed_rng"]})
        persistence.set_rng_state(state)

    def parts(self, manifest: dict[str, Any] | None = None, training_state: bool = False) -> dict[str, Any]:
        """What a save writes (``lmgym.agents.persistence.write``): the model, tokenizer, value head,
        config, reference model, the manifest (the base of adapters, and ``manifest``'s entries:
        how the env was wrapped) and, with ``training_state``, ``state_dict()``."""
        model: Any = self.model
        base = model.get_base_model().name_or_path if self.is_peft else None
        info = persistence.manifest(base, self.is_peft, self.tokenizer.vocab_size, manifest)
        return {
            "model": self.model,
            "tokenizer": self.tokenizer,
            "value_head": self.value_head.state_dict(),
            "config": self.config.to_dict(),
            "manifest": info,
            "ref_model": self.ref_model,
            "training_state": self.state_dict() if training_state else None,
        }

    def save(self, path: str | os.PathLike, training_state: bool = False, manifest: dict | None = None) -> None:
        """Writes the model (``from_pretrained``-loadable; for LoRA, the adapters), tokenizer, value
        head, config and a manifest (``lmgym_model.json``); with ``training_state``, also what
        ``learn(resume_from=...)`` needs. ``path`` holds the old save or the new one, never half."""
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            persistence.save(path, **self.parts(manifest, training_state))

    def save_checkpoint(self, checkpoint_dir: str | os.PathLike, envs: Any = None) -> Path:
        """Writes ``checkpoint_dir/update-NNNNNN`` (model, optimizer, counters, RNGs, and a manifest
        written last) and points ``checkpoint_dir/last`` at it (``lmgym.agents.checkpoints``)."""
        name = f"update-{self.num_updates:06d}"
        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return Path(checkpoint_dir) / name
        info = {
            "num_updates": self.num_updates,
            "num_episodes": self.num_episodes,
            "model_signature": model_signature(self.model),
            "env": self.env_fingerprint(envs),
        }
        return persistence.save_checkpoint(checkpoint_dir, name, info, **self.parts(training_state=True))

    def env_fingerprint(self, envs: Any = None) -> dict[str, Any]:
        """What a checkpoint must share with the run that resumes it: the env id and the tokens."""
        return persistence.env_fingerprint(env_id_of(envs) if envs is not None else None, self.tokens_fingerprint)

    @classmethod
    def load(cls, path: str | os.PathLike, config: PPOConfig | None = None) -> PPOAgent:
        """An agent from ``save``: model (base + adapters for LoRA, the base named by the manifest),
        tokenizer, value head, reference model and config (``config`` instead of the saved one)."""
        saved = persistence.read(path)
        agent = cls(
            saved["model"],
            tokenizer=saved["tokenizer"],
            ref_model=saved["ref_model"],
            config=config or PPOConfig.from_dict(saved["config"]),
        )
        agent.value_head.load_state_dict(saved["value_head"])
        return agent

    def load_training_state(self, path: str | os.PathLike, envs: gym.Env | Any = None) -> Path:
        """Restores weights, optimizer, KL controller, counters and RNGs from a checkpoint that
        ``learn`` wrote (``path``: the checkpoint, ``checkpoints/last``, the checkpoints dir or the
        run dir), after checking that it is complete, undamaged, data only and of this model and
        env (``checkpoints.CheckpointError`` otherwise). Returns the checkpoint it used."""
        saved = persistence.read_checkpoint(path, model_signature(self.model), self.env_fingerprint(envs))
        with fitting(saved["path"]):
            self.model.load_state_dict(saved["model"])
            if self.ref_model is not None and saved["ref_model"] is not None:
                self.ref_model.load_state_dict(saved["ref_model"])
            self.value_head.load_state_dict(saved["value_head"])
            self.load_state_dict(saved["training_state"])
        self.sync_engine()  # the engine samples with the loaded weights, as their version
        return saved["path"]

    def memory_estimate(self) -> dict[str, float]:
        """Bytes before activations (``lmgym.agents.models.memory_estimate``)."""
        trainable = sum(p.numel() for p in self.policy.parameters() if p.requires_grad)
        return memory_estimate(self.model, trainable, self.ref_model)


__all__ = ["EVAL_SEED_OFFSET", "PPOAgent", "as_vector_env", "load_model"]  # load_model: lmgym.agents.models
