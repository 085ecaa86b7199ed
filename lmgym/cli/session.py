"""What ``lmgym train`` and ``lmgym eval`` set up alike: threads, quiet logs, the agent (the
default model or ``--model``, warm-started when asked), and the envs it plays."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from lmgym.cli.options import UsageError


def set_threads(threads: int | None) -> None:
    import torch

    torch.set_num_threads(threads or max(1, min(2, os.cpu_count() or 1)))


def quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars
    transformers.utils.logging.set_verbosity_error()


def make_agent(args: argparse.Namespace, config: Any, env_kwargs: dict[str, Any]) -> Any:
    """The agent to train or evaluate: the default model (no ``--model``) or ``--model``,
    warm-started on demonstrations with ``--warmstart-steps``."""
    from lmgym.agents import PPOAgent

    if args.model is None:
        model, tokenizer = default_model(args, env_kwargs)
    else:
        model, tokenizer = given_model(args, env_kwargs)
    try:
        if args.model is not None and getattr(args, "warmstart_steps", None):
            check_chat_template(args, tokenizer)
            model = warm_start(args, model, tokenizer, env_kwargs, config)
        return PPOAgent(model, tokenizer=tokenizer, config=config)
    except ValueError as e:  # the vocabulary does not cover the tokenizer; a LoRA target is not in the model
        raise UsageError(str(e).splitlines()[0]) from e


def default_model(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> tuple[Any, Any]:
    from lmgym.agents.warmstart import WarmStartConfig
    from lmgym.agents.warmstart import default_model as build

    print("building the default model (a tiny Llama, warm-started on demonstrations; cached after the first run)")
    warm = WarmStartConfig(seed=args.seed)
    if getattr(args, "warmstart_steps", None) is not None:
        warm = dataclasses.replace(warm, steps=args.warmstart_steps)
    try:
        model, tokenizer, _ = build(
            args.env_id,
            env_kwargs,
            warm,
            use_cache=not getattr(args, "no_cache", False),
            step_timeout=getattr(args, "cfg_step_timeout", None),
        )
    except NotImplementedError as e:
        raise UsageError(f"{args.env_id} has no oracle to warm-start the default model from ({e}); pass --model") from e
    return model, tokenizer


def given_model(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> tuple[Any, Any]:
    from lmgym.agents.warmstart import load_for_env
    from lmgym.storage import find_damaged

    damaged = find_damaged(args.model) if os.path.isdir(args.model) else None
    if damaged:
        raise UsageError(f"--model: {damaged}")
    try:
        return load_for_env(args.model, args.env_id, env_kwargs, getattr(args, "add_special_tokens", False))
    except (ValueError, ImportError) as e:
        raise UsageError(str(e).splitlines()[0]) from e


def warm_start(args: argparse.Namespace, model: Any, tokenizer: Any, env_kwargs: dict[str, Any], config: Any) -> Any:
    """``--model M --warmstart-steps N``: the supervised warm start on the env's demonstrations,
    rendered as the RL phase renders them; the result is saved in ``OUT/warmstart`` (LoRA
    adapters trained on it later name it as their base)."""
    from lmgym.agents.warmstart import warm_start as supervised
    from lmgym.storage import written_aside

    lora = config.model.peft_config
    print(
        f"warm start of {args.model}: {args.warmstart_steps} supervised steps on demonstrations "
        f"({'LoRA, merged' if lora else 'full'})"
    )
    env = guarded_env(args, tokenizer, env_kwargs)
    try:
        model, losses = supervised(model, tokenizer, env, args.warmstart_steps, lora=lora, seed=args.seed)
    finally:
        env.close()
    print(f"warm start: loss {losses[0]:.3f} -> {sum(losses[-10:]) / len(losses[-10:]):.3f}")
    target = Path(args.out) / "warmstart"
    with written_aside(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    model.name_or_path = model.config._name_or_path = str(target)
    return model


def pretrained_recipe(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> Any:
    """``--model``: ``lmgym.agents.defaults.pretrained_recipe`` for the env as the run plays it
    (its tools and chat template, the model's tokenizer). What the user set stays: a
    ``--warmstart-steps``, an ``--env-arg max_action_tokens`` or ``max_episode_steps``, a
    ``--lora``, any config flag."""
    from lmgym.agents import defaults
    from lmgym.tokenizers import load_tokenizer

    try:
        tokenizer = load_tokenizer(args.model)
    except (ValueError, OSError, ImportError) as e:
        raise UsageError(f"--model {args.model}: {str(e).splitlines()[0]}") from e
    check_chat_template(args, tokenizer)
    env = guarded_env(args, tokenizer, env_kwargs)
    try:
        recipe = defaults.pretrained_recipe(env, tokenizer, lora=None if args.lora is None else args.lora != "none")
    finally:
        env.close()
    if args.warmstart_steps is None:
        args.warmstart_steps = recipe.warmstart_steps
    recipe.warmstart_steps = args.warmstart_steps
    for budget in ("max_action_tokens", "max_episode_steps"):  # an --env-arg wins over the recipe
        if getattr(recipe, budget) and budget not in env_kwargs:
            env_kwargs[budget] = getattr(recipe, budget)
        setattr(recipe, budget, env_kwargs.get(budget))
    return recipe


CHECKED_TEMPLATES: set[str] = set()
"""Chat templates this process rendered in the sandbox without a problem (``template_problem``)."""


def check_chat_template(args: argparse.Namespace, tokenizer: Any) -> None:
    """``--chat-template``: the tokenizer has one, and it renders (once per process, in a sandbox:
    a model directory's template is code lmgym did not write)."""
    from lmgym.tokenizers import HFTokenizer
    from lmgym.wrappers.chat_template import template_problem

    hf = tokenizer.hf if isinstance(tokenizer, HFTokenizer) else None
    if not args.chat_template:
        return
    template = getattr(hf, "chat_template", None)
    if not template:
        raise UsageError(f"--chat-template: the tokenizer of {args.model or 'the default model'} has no chat template")
    if template not in CHECKED_TEMPLATES:
        problem = template_problem(hf)
        if problem:
            raise UsageError(f"--chat-template: the chat template of {args.model}: {problem}")
        CHECKED_TEMPLATES.add(template)


def env_maker(args: argparse.Namespace, tokenizer: Any, env_kwargs: dict[str, Any]) -> Any:
    """A function that makes one env as the run plays it (its tools and chat template, when asked)."""
    import gymnasium as gym

    from lmgym.cli.options import with_tools
    from lmgym.wrappers import ChatTemplate

    env_id, module, tools = args.env_id, getattr(args, "env_module", None), getattr(args, "tools", None)
    chat, system = args.chat_template, args.system

    def make() -> gym.Env:  # pickled to Ray actors with what it needs, not the whole args
        if module:  # a user's env module: registered in this process too
            __import__(module)
        env = with_tools(gym.make(env_id, tokenizer=tokenizer, **env_kwargs), tools)
        return ChatTemplate(env, system=system) if chat else env

    return make


def guarded_env(args: argparse.Namespace, tokenizer: Any, env_kwargs: dict[str, Any]) -> Any:
    """One env as the run plays it, for the recipe's and the warm start's oracle play: a failure
    in it is an ``EnvError`` naming the env, seed and turn, as in the rollout."""
    from lmgym.vector import Guarded

    return Guarded(env_maker(args, tokenizer, env_kwargs)(), step_timeout=getattr(args, "step_timeout", None))


def make_envs(args: argparse.Namespace, n: int, tokenizer: Any, env_kwargs: dict[str, Any]) -> Any:
    """``n`` envs stepped at the same time (``ConcurrentVectorEnv``: tool calls overlap; results
    are exactly a ``SyncVectorEnv``'s), autoreset in the same step; with ``--env-workers N``, in
    N Ray actors (``RayVectorEnv``)."""
    from gymnasium.vector import AutoresetMode

    from lmgym.vector import ConcurrentVectorEnv

    fns, mode = [env_maker(args, tokenizer, env_kwargs)] * n, AutoresetMode.SAME_STEP
    workers = getattr(args, "env_workers", None)
    if workers:
        from lmgym.vector.remote import RayVectorEnv

        try:
            return RayVectorEnv(
                fns, envs_per_actor=-(-n // workers), num_cpus=args.env_worker_cpus, autoreset_mode=mode
            )
        except ValueError as e:  # a placement that can never fit
            raise UsageError(f"--env-workers {workers}: {e}") from e
    return ConcurrentVectorEnv(fns, autoreset_mode=mode)


def connect_ray(args: argparse.Namespace) -> None:
    """``--ray [ADDRESS]``: joins the Ray cluster at ADDRESS (``auto``: the one running here) or
    starts a local one (quiet, no dashboard, a small object store); ``--env-workers`` and
    ``--engines`` then place their actors on it. An address where nothing answers is one line."""
    if getattr(args, "ray", None) is None and not getattr(args, "env_workers", None):
        return
    try:
        import ray
    except ImportError as e:
        raise UsageError("--ray, --env-workers: Ray is not installed: pip install 'lmgym[ray]'") from e
    from lmgym.vector.remote import init_local_ray

    if ray.is_initialized():
        return
    if args.ray in (None, "local"):
        init_local_ray()
    else:
        import logging

        check_ray_address(args.ray)
        try:
            ray.init(address=args.ray, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UsageError(f"--ray {args.ray}: cannot join the cluster there ({str(e).splitlines()[0]:.200})") from e
    resources = ray.cluster_resources()
    print(f"Ray: {len(ray.nodes())} node(s), {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs")


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


def warn_cut_turns(agent: Any, batch: Any, budget: int) -> None:
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


__all__ = [
    "check_chat_template",
    "check_ray_address",
    "connect_ray",
    "pretrained_recipe",
    "env_maker",
    "make_agent",
    "make_envs",
    "quiet_transformers",
    "set_threads",
    "warm_start",
    "warn_cut_turns",
]
