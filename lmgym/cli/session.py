"""What ``lmgym train`` and ``lmgym eval`` set up alike, from their ``RunSpec``: threads, quiet
logs, the agent (the default model or ``--model``, warm-started when asked), the pretrained
recipe, and the envs it plays."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lmgym.cli.options import UsageError
from lmgym.cli.spec import RunSpec, flat, nested
from lmgym.core import close_within

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv
    from transformers import PreTrainedModel

    from lmgym.agents.config import PPOConfig
    from lmgym.agents.defaults import Recipe
    from lmgym.agents.ppo import PPOAgent
    from lmgym.tokenizers import Tokenizer


def set_threads(threads: int | None) -> None:
    import torch

    torch.set_num_threads(threads or max(1, min(2, os.cpu_count() or 1)))


def quiet_transformers() -> None:
    """No progress bars of transformers' own, only its errors, and none of its deprecation
    notices (``FutureWarning``s about its own API that a user of lmgym cannot act on)."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")


def make_agent(spec: RunSpec) -> PPOAgent:
    """The agent to train or evaluate with ``spec.config``: the default model (no ``--model``) or
    ``--model``, warm-started on demonstrations with ``--warmstart-steps``."""
    from lmgym.agents import PPOAgent

    if spec.model is None:
        model, tokenizer = default_model(spec)
    else:
        model, tokenizer = given_model(spec)
    try:
        if spec.model is not None and spec.warmstart_steps:
            check_chat_template(spec, tokenizer)
            model = warm_start(spec, model, tokenizer)
        return PPOAgent(model, tokenizer=tokenizer, config=spec.config)
    except ValueError as e:  # the vocabulary does not cover the tokenizer; a LoRA target is not in the model
        raise UsageError(str(e).splitlines()[0]) from e


def default_model(spec: RunSpec) -> tuple[PreTrainedModel, Tokenizer]:
    from lmgym.agents.warmstart import WarmStartConfig
    from lmgym.agents.warmstart import default_model as build

    print("building the default model (a tiny Llama, warm-started on demonstrations; cached after the first run)")
    warm = WarmStartConfig(seed=spec.seed)
    if spec.warmstart_steps is not None:
        warm = dataclasses.replace(warm, steps=spec.warmstart_steps)
    try:
        model, tokenizer, _ = build(
            spec.env_id, spec.env_kwargs, warm, use_cache=not spec.no_cache, step_timeout=spec.step_timeout
        )
    except NotImplementedError as e:
        raise UsageError(f"{spec.env_id} has no oracle to warm-start the default model from ({e}); pass --model") from e
    return model, tokenizer


def given_model(spec: RunSpec) -> tuple[PreTrainedModel, Tokenizer]:
    from lmgym.agents.warmstart import load_for_env
    from lmgym.storage import find_damaged

    assert spec.model is not None
    damaged = find_damaged(spec.model) if os.path.isdir(spec.model) else None
    if damaged:
        raise UsageError(f"--model: {damaged}")
    try:
        return load_for_env(spec.model, spec.env_id, spec.env_kwargs, spec.add_special_tokens)
    except (ValueError, ImportError) as e:
        raise UsageError(str(e).splitlines()[0]) from e


def warm_start(spec: RunSpec, model: PreTrainedModel, tokenizer: Tokenizer) -> PreTrainedModel:
    """``--model M --warmstart-steps N``: the supervised warm start on the env's demonstrations,
    rendered as the RL phase renders them; the result is saved in ``OUT/warmstart`` (LoRA
    adapters trained on it later name it as their base)."""
    from lmgym.agents.warmstart import warm_start as supervised
    from lmgym.storage import written_aside

    assert spec.config is not None and spec.warmstart_steps
    lora = spec.config.model.peft_config
    print(
        f"warm start of {spec.model}: {spec.warmstart_steps} supervised steps on demonstrations "
        f"({'LoRA, merged' if lora else 'full'})"
    )
    env = guarded_env(spec, tokenizer)
    try:
        model, losses = supervised(model, tokenizer, env, spec.warmstart_steps, lora=lora, seed=spec.seed)
    finally:
        close_within(env)
    print(f"warm start: loss {losses[0]:.3f} -> {sum(losses[-10:]) / len(losses[-10:]):.3f}")
    target = spec.out / "warmstart"
    with written_aside(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
    model.name_or_path = model.config._name_or_path = str(target)
    return model


def pretrained_recipe(spec: RunSpec) -> tuple[RunSpec, Recipe]:
    """``--model``: ``lmgym.agents.defaults.pretrained_recipe`` for the env as the run plays it
    (its tools and chat template, the model's tokenizer), and the spec with what it picked: the
    warm start and the budgets. What the user set stays: a ``--warmstart-steps``, an ``--env-arg
    max_action_tokens`` or ``max_episode_steps``, a ``--lora``, any config flag."""
    from lmgym.agents import defaults
    from lmgym.tokenizers import load_tokenizer

    assert spec.model is not None
    try:
        tokenizer = load_tokenizer(spec.model)
    except (ValueError, OSError, ImportError) as e:
        raise UsageError(f"--model {spec.model}: {str(e).splitlines()[0]}") from e
    check_chat_template(spec, tokenizer)
    env = guarded_env(spec, tokenizer)
    try:
        lora = None if spec.lora is None else spec.lora != "none"
        recipe = defaults.pretrained_recipe(env, tokenizer, lora=lora, warmstart=spec.warmstart_steps)
    except defaults.BudgetTooShort as e:
        raise UsageError(str(e).splitlines()[0]) from e
    finally:
        close_within(env)
    steps = recipe.warmstart_steps if spec.warmstart_steps is None else spec.warmstart_steps
    budgets = {k: v for k in ("max_action_tokens", "max_episode_steps") if (v := getattr(recipe, k))}
    env_kwargs = {**spec.env_kwargs, **{k: v for k, v in budgets.items() if k not in spec.env_kwargs}}  # flags win
    recipe = dataclasses.replace(
        recipe,
        warmstart_steps=steps,
        max_action_tokens=env_kwargs.get("max_action_tokens"),
        max_episode_steps=env_kwargs.get("max_episode_steps"),
        episodes=spec.episodes,
    )
    return dataclasses.replace(spec, warmstart_steps=steps, env_kwargs=env_kwargs), recipe


def default_budgets(spec: RunSpec) -> RunSpec:
    """The default model on an env of long episodes (``defaults.long_episodes``): the turn and
    token budgets the env's oracle needs (``defaults.action_budget`` in the byte tokenizer's
    tokens), each where it is less than the env's and not set by ``--env-arg``, and the recipe's
    ``LONG_EPISODE_BATCHES`` (``defaults.default_settings``, as ``PPOAgent.default`` has them)
    unless a flag sets one of them. A text world's default run then stops its untrained model's
    noise at twice the oracle's longest command and most turns (``tw-simple``: 88 tokens and 24
    turns, not 128 and 50)."""
    import gymnasium as gym

    from lmgym.agents.defaults import LONG_EPISODE_BATCHES, long_episodes

    if not long_episodes(spec.env_id, spec.env_kwargs):
        return spec
    limit = int(spec.env_kwargs.get("max_episode_steps", gym.spec(spec.env_id).max_episode_steps or 0))
    batches = flat(LONG_EPISODE_BATCHES)
    if not set(batches) & set(spec.settings):
        print("4 episodes a pass, 16 an optimizer step (an env of long episodes; --mini-batch-size etc. to choose)")
        spec = dataclasses.replace(spec, settings={**spec.settings, **batches})
    sized = {} if {"max_action_tokens", "max_episode_steps"} <= set(spec.env_kwargs) else oracle_budgets(spec, limit)
    if sized:
        print(f"budgets from the demonstrations (an env of long episodes): {sized} (--env-arg KEY=VALUE to choose)")
    return dataclasses.replace(spec, env_kwargs={**spec.env_kwargs, **sized})


def oracle_budgets(spec: RunSpec, limit: int) -> dict[str, int]:
    """``defaults.long_episode_budgets`` of the env the run plays (in the default model's byte
    tokens), ``--env-arg``s given."""
    from lmgym.agents.defaults import long_episode_budgets
    from lmgym.agents.warmstart import env_special_tokens
    from lmgym.tokenizers import ByteTokenizer

    tokenizer = ByteTokenizer(env_special_tokens(spec.env_id, spec.env_kwargs))
    env = guarded_env(spec, tokenizer)
    try:
        return long_episode_budgets(env, tokenizer, limit, spec.env_kwargs)
    finally:
        close_within(env)


CHECKED_TEMPLATES: set[str] = set()
"""Chat templates this process rendered in the sandbox without a problem (``template_problem``)."""


def check_chat_template(spec: RunSpec, tokenizer: Any) -> None:
    """``--chat-template``: the tokenizer has one, and it renders (once per process, in a sandbox:
    a model directory's template is code lmgym did not write)."""
    from lmgym.tokenizers import HFTokenizer
    from lmgym.wrappers.chat_template import template_problem

    if not spec.chat_template:
        return
    hf = tokenizer.hf if isinstance(tokenizer, HFTokenizer) else None
    template = getattr(hf, "chat_template", None)
    if not template:
        raise UsageError(f"--chat-template: the tokenizer of {spec.model or 'the default model'} has no chat template")
    if template not in CHECKED_TEMPLATES:
        problem = template_problem(hf)
        if problem:
            raise UsageError(f"--chat-template: the chat template of {spec.model}: {problem}")
        CHECKED_TEMPLATES.add(template)


def env_maker(spec: RunSpec, tokenizer: Tokenizer) -> Callable[[], gym.Env]:
    """A function that makes one env as the run plays it (its tools and chat template, when asked)."""
    import gymnasium as gym

    from lmgym.cli.options import with_tools
    from lmgym.wrappers import ChatTemplate

    env_id, module, tools, env_kwargs = spec.env_id, spec.env_module, spec.tools, dict(spec.env_kwargs)
    chat, system = spec.chat_template, spec.system

    def make() -> gym.Env:  # pickled to Ray actors with what it needs, not the whole spec
        if module:  # a user's env module: registered in this process too
            __import__(module)
        env = with_tools(gym.make(env_id, tokenizer=tokenizer, **env_kwargs), tools)
        return ChatTemplate(env, system=system) if chat else env

    return make


def guarded_env(spec: RunSpec, tokenizer: Tokenizer) -> gym.Env:
    """One env as the run plays it, for the recipe's and the warm start's oracle play: a failure
    in it is an ``EnvError`` naming the env, seed and turn, as in the rollout."""
    from lmgym.vector import Guarded

    make = env_maker(spec, tokenizer)
    return Guarded(make(), factory=make, step_timeout=spec.step_timeout)


def reply_budget(spec: RunSpec, agent: PPOAgent, episodes: int = 16) -> int:
    """The turn budget of a run from rewards alone (``defaults.sampled_reply_budget``): the
    model's own replies on the run's env, sampled with a generous budget (``PURE_RL_PROBE_TOKENS``,
    or half the model's context if that is less)."""
    from lmgym.agents.defaults import PURE_RL_PROBE_TOKENS, sampled_reply_budget

    cap = min(PURE_RL_PROBE_TOKENS, agent.rollout.max_context_tokens // 2)  # the model's context bounds it too
    probe = make_envs(
        dataclasses.replace(spec, env_kwargs={**spec.env_kwargs, "max_action_tokens": cap}), 8, agent.tokenizer
    )
    try:
        budget, lengths = sampled_reply_budget(agent, probe, cap, episodes)
    finally:
        close_within(probe)
    cut = sum(n >= cap for n in lengths)
    print(f"turn budget: {budget} tokens, from {len(lengths)} sampled replies ({cut} of them reached {cap} tokens)")
    return budget


def make_envs(spec: RunSpec, n: int, tokenizer: Tokenizer) -> VectorEnv:
    """``n`` envs stepped at the same time (``ConcurrentVectorEnv``: tool calls overlap; results
    are exactly a ``SyncVectorEnv``'s), autoreset in the same step; with ``--env-workers N``, in
    N Ray actors (``RayVectorEnv``)."""
    from gymnasium.vector import AutoresetMode

    from lmgym.vector import ConcurrentVectorEnv

    fns, mode = [env_maker(spec, tokenizer)] * n, AutoresetMode.SAME_STEP
    if spec.env_workers:
        from lmgym.vector.remote import RayVectorEnv

        per_actor = -(-n // spec.env_workers)
        return RayVectorEnv(fns, envs_per_actor=per_actor, num_cpus=spec.env_worker_cpus, autoreset_mode=mode)
    return ConcurrentVectorEnv(fns, autoreset_mode=mode)


def connect_ray(spec: RunSpec) -> None:
    """``--ray [ADDRESS]``: joins the Ray cluster at ADDRESS (``auto``: the one running here) or
    starts a local one (quiet, no dashboard, a small object store); ``--env-workers`` and
    ``--engines`` then place their actors on it. An address where nothing answers is one line."""
    if spec.ray is None and not spec.env_workers:
        return
    try:
        import ray
    except ImportError as e:
        raise UsageError("--ray, --env-workers: Ray is not installed: pip install 'lmgym[ray]'") from e
    from lmgym.vector.remote import init_local_ray

    if ray.is_initialized():
        return
    if spec.ray in (None, "local"):
        init_local_ray()
    else:
        import logging

        check_ray_address(spec.ray)
        try:
            ray.init(address=spec.ray, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UsageError(f"--ray {spec.ray}: cannot join the cluster there ({str(e).splitlines()[0]:.200})") from e
    resources = ray.cluster_resources()
    print(f"Ray: {len(ray.nodes())} node(s), {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs")
    most = max((node.get("Resources", {}).get("CPU", 0) for node in ray.nodes() if node.get("Alive")), default=0)
    if spec.env_worker_cpus and spec.env_worker_cpus > most:
        raise UsageError(
            f"--env-worker-cpus {spec.env_worker_cpus:g}: no node of the cluster has that many CPUs (at most "
            f"{most:g}), so no env actor could be placed"
        )


def check_ray_address(address: str, seconds: float = 3.0) -> None:
    """``auto`` or ``HOST:PORT`` where something answers within ``seconds`` (``ray.init`` retries an
    address where nothing does for minutes); else ``UsageError``."""
    import socket

    if address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray {address!r}: expected HOST:PORT of a Ray cluster's head, auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as e:
        raise UsageError(f"--ray {address}: nothing answers there ({e.strerror or e})") from e


def warn_cut_turns(agent: PPOAgent, batch: Any, budget: int) -> None:
    """One warning when a BPE model's turns keep hitting the env's action bound (sized for the
    byte tokenizer): more than a quarter of them in the first evaluation."""
    from lmgym.tokenizers import HFTokenizer

    if not isinstance(agent.tokenizer, HFTokenizer):
        return
    lengths = []
    for episode in batch.episodes:
        mask = episode.action_mask.tolist()
        for end in episode.turn_ends:
            start = end
            while start > 0 and mask[start - 1]:
                start -= 1
            lengths.append(end - start + 1)
    share = sum(n >= budget for n in lengths) / max(1, len(lengths))
    if share > 0.25:
        print(
            f"warning: {share:.0%} of the model's turns were cut at the env's max_action_tokens={budget}; "
            "a BPE model may need more: --env-arg max_action_tokens=N"
        )


def with_reply_budget(spec: RunSpec, recipe: Recipe | None, agent: Any) -> RunSpec:
    """A run from rewards alone takes its turn budget from the model's own sampled replies
    (``session.reply_budget``) unless the user set ``max_action_tokens``."""
    if recipe is None or not recipe.pure or "max_action_tokens" in spec.env_kwargs:
        return spec
    return dataclasses.replace(spec, env_kwargs={**spec.env_kwargs, "max_action_tokens": reply_budget(spec, agent)})


def run_envs_count(spec: RunSpec) -> int:
    """The run's envs: ``--num-envs`` rounded down to whole groups, at least one group."""
    assert spec.config is not None
    k = spec.config.group_size or 1
    return max(k, spec.num_envs // k * k)


def run_config(spec: RunSpec, recipe: Recipe | None = None) -> PPOConfig:
    """The ``PPOConfig`` of the run: the default model's settings (no ``--model``) or a pretrained
    model's ``recipe``, then the flags; a recipe's one line says what was picked in the end."""
    from lmgym.agents.config import PPOConfig
    from lmgym.agents.defaults import TINY_MODEL_CONFIG

    base = dict(TINY_MODEL_CONFIG) if recipe is None else dict(recipe.config)
    chosen = dict(spec.settings)
    if spec.lora:
        from lmgym.agents.models import parse_lora

        chosen[("model", "peft_config")] = None if spec.lora == "none" else parse_lora(spec.lora)
    chosen[("seed",)] = spec.seed
    if spec.estimator is not None:
        chosen[("estimator",)] = spec.estimator
    if spec.generation_kwargs is not None:  # on top of the recipe's (its temperature stays unless given)
        recipe_kwargs = base.get("rollout", {}).get("generation_kwargs", {})
        chosen[("rollout", "generation_kwargs")] = {**recipe_kwargs, **spec.generation_kwargs}
    given = nested(chosen)
    for group in ("rollout", "engine", "model", "run"):  # a group the recipe set and the flags set both
        if isinstance(base.get(group), dict) and group in given:
            given[group] = {**base[group], **given[group]}
    try:
        config = PPOConfig(**{**base, **given})
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from e
    if recipe is not None:
        print(f"recipe for a pretrained model: {recipe.describe(config)} (each of them a flag)")
    return config


__all__ = [
    "check_chat_template",
    "check_ray_address",
    "connect_ray",
    "default_budgets",
    "pretrained_recipe",
    "run_config",
    "run_envs_count",
    "with_reply_budget",
    "env_maker",
    "make_agent",
    "make_envs",
    "quiet_transformers",
    "set_threads",
    "warm_start",
    "warn_cut_turns",
]
