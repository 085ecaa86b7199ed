"""Rollout engines: what generates a turn for a batch of token contexts.

The interface is small (``Engine``, in ``base``): ``generate(contexts, stop_strings,
max_new_tokens, keys=None, **generation_kwargs)`` returns, per context, the sampled token ids of
one turn and the sampler's log-prob of each; ``sync_weights()`` pushes the policy's weights after
an update; ``reset()`` drops whatever the engine cached; ``close()`` stops its processes.

- ``HFEngine`` (``hf``, the default, ``PPOConfig(engine={"name": "hf"})``): the trained model itself, in a
  lean decode loop with a KV cache kept across the turns of an episode, which also returns the
  policy's log-probs and values (no second forward pass for them). Its per-row API
  (``begin``/``flush``/``step``/``forget``) is the one decode loop both rollouts drive.
- ``VLLMEngine`` (``vllm``, ``PPOConfig(engine={"name": "vllm"})``): vLLM in a process of its own, on a GPU
  or on its CPU build; weights reloaded after each update, truncated importance sampling.
- ``RayEngine`` (``remote``, ``PPOConfig(engine={"engines": N})``): N of either in Ray actors, anywhere in a
  Ray cluster; an episode's turns on one of them; weights through files on a shared path.

``sampling`` holds the per-row sampler and the per-episode random streams. Engines take an
``EnginePolicy`` (the policy module, tokenizer and sampling settings), not the agent.
"""

from __future__ import annotations

from typing import Any

from lmgym.agents.config import ENGINES
from lmgym.agents.engines.base import Engine, EngineDied, EnginePolicy, EngineUnavailable, Generation
from lmgym.agents.engines.hf import HFEngine, SnapshotEngine, hf_generate
from lmgym.agents.engines.sampling import filtered, sample, stream_key, uniforms
from lmgym.agents.engines.vllm import VLLMEngine, vllm_problem


def engine_problem(name: str) -> str | None:
    """Why the engine ``name`` cannot run here, or ``None``: checked before any model is built."""
    return vllm_problem() if name == "vllm" else None


def make_engine(name: str, policy: EnginePolicy, engines: int = 0, **kwargs: Any) -> Engine:
    """The engine ``PPOConfig.engine.name`` names, built with ``kwargs`` (``PPOConfig.engine.kwargs``);
    with ``engines`` > 0, that many of it in Ray actors (``RayEngine``)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")
    if engines:
        from lmgym.agents.engines.remote import RayEngine

        return RayEngine(policy, engines, name, **kwargs)
    problem = engine_problem(name)
    if problem:
        raise EngineUnavailable(problem)
    return HFEngine(policy, **kwargs) if name == "hf" else VLLMEngine(policy, **kwargs)


__all__ = [
    "ENGINES",
    "Engine",
    "EngineDied",
    "EnginePolicy",
    "EngineUnavailable",
    "Generation",
    "HFEngine",
    "SnapshotEngine",
    "VLLMEngine",
    "engine_problem",
    "filtered",
    "hf_generate",
    "make_engine",
    "sample",
    "stream_key",
    "uniforms",
]
