"""Recording a turn into an episode, and the overlapped rollout.

``record_turn`` is what every rollout does with one env's step: the action, its reward and
info, and the next observation (or the end of the episode, with the final observation of a
truncated one when it fits the model's context).

``overlapped_wave`` plays one wave of episodes in a ``ConcurrentVectorEnv`` with the HF
engine's decode loop, without waiting for the slowest env: when an env's turn is generated
its step (a tool call) starts in the vector env's thread pool and decoding goes on for the
other envs; when the step returns, its observation is prefilled into that env's KV-cache row
and the env rejoins the decode batch (continuous batching over episodes). Each episode samples
from its own random stream (``engines.uniforms``, keyed by episode and token position), so the
episodes are the ones the step-by-step rollout gives for the same keys.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np

from lmgym.agents.engines import Generation, HFEngine, sample
from lmgym.agents.trajectories import EpisodeBuilder
from lmgym.core import ends_turn
from lmgym.vector import ConcurrentVectorEnv

if TYPE_CHECKING:
    from lmgym.agents.ppo import PPOAgent


def record_turn(
    agent: PPOAgent,
    builder: EpisodeBuilder,
    turn: Generation,
    action: list[int],
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    obs: str,
    contract: dict[str, Any],
) -> list[int] | None:
    """Adds one step to ``builder``; ``obs`` is the next observation (the final one when the
    episode ended). Returns the observation's ids when the episode goes on, else ``None``."""
    exact = agent.engine.exact and bool(turn.tokens)
    builder.add_action(
        action,
        float(reward),
        info,
        logprobs=turn.logprobs if exact else None,
        values=turn.values if exact else None,
        sampler_logprobs=None if exact or not turn.tokens else turn.logprobs,
    )
    limit = agent.max_context_tokens
    ids = agent.tokenizer.encode(obs)
    if terminated or truncated:
        builder.terminated, builder.truncated = bool(terminated), bool(truncated and not terminated)
        if builder.truncated and len(builder.tokens) + len(ids) <= limit:  # the bootstrap state sees it
            builder.add_observation(ids)
        return None
    if len(builder.tokens) + len(ids) + contract["max_new_tokens"] > limit:  # the next turn would not fit
        builder.truncated = True
        builder.add_observation(ids[: max(0, limit - len(builder.tokens))])
        return None
    builder.add_observation(ids)
    return ids


def overlapped_wave(
    agent: PPOAgent,
    vec: ConcurrentVectorEnv,
    builders: list[EpisodeBuilder],
    keys: list[int],
    contract: dict[str, Any],
) -> None:
    """Plays sub-envs ``0..len(builders)-1`` (already reset) to the end of their episodes,
    stepping each in ``vec``'s thread pool as soon as its turn is generated."""
    engine = agent.engine
    assert isinstance(engine, HFEngine)
    tok, budget, stops = agent.tokenizer, contract["max_new_tokens"], contract["stop_strings"]
    kwargs = {**agent.config.sampling_kwargs, **contract.get("generation_kwargs", {})}
    envs = [cast(gym.Wrapper, env).env for env in vec.envs]  # past ConcurrentVectorEnv's Prefetched
    turns = {i: Generation([], [], []) for i in range(len(builders))}  # the rows decoding
    pending: dict[Future, tuple[int, Generation]] = {}  # the rows in their env's step
    ready: dict[int, list[int]] = {}  # the rows whose step returned: the tokens they rejoin with
    engine.reset()
    with engine.decoding() as policy:
        logits, hidden = engine.prefill(policy.model, [b.tokens for b in builders])
        while turns or pending or ready:
            feeds: list[list[int]] = [[] for _ in builders]
            if turns:
                rows = sorted(turns)
                positions = [len(builders[i].tokens) + len(turns[i].tokens) for i in rows]
                tokens, picked = sample(logits[rows], kwargs, [keys[i] for i in rows], positions)
                values = policy.value_head(hidden[rows].float()).squeeze(-1).tolist()
                for i, t, logprob, value in zip(rows, tokens, picked, values):
                    g = turns[i]
                    g.tokens.append(t)
                    g.logprobs.append(logprob)  # type: ignore[union-attr]
                    g.values.append(value)  # type: ignore[union-attr]
                    if ends_turn(g.tokens, tok, stops) or len(g.tokens) >= budget:
                        del turns[i]
                        pending[vec.pool.submit(envs[i].step, np.array(g.tokens, dtype=np.int64))] = (i, g)
                    else:
                        feeds[i] = [t]
            if pending and not any(feeds) and not ready:  # nothing to decode: wait for a step to return
                wait(pending, return_when=FIRST_COMPLETED)
            for future in [f for f in pending if f.done()]:
                i, g = pending.pop(future)
                obs, reward, terminated, truncated, info = future.result()
                args = (g.tokens, reward, terminated, truncated, plain_info(info), obs, contract)
                ids = record_turn(agent, builders[i], g, *args)
                if ids is not None:  # to rejoin with the turn's last token (never fed) and the observation
                    ready[i] = [g.tokens[-1], *ids]
            decoding = sum(map(bool, feeds))
            if ready and len(ready) >= decoding:  # rejoin together: a prefill pads every row to its width
                for i, ids in ready.items():
                    feeds[i] = ids
                    turns[i] = Generation([], [], [])
                ready.clear()
            if any(feeds):
                logits, hidden = engine.feed(policy.model, feeds)


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """A sub-env's info as a vector env's info reads back for it (numpy scalars as Python's)."""
    return {
        k: plain_info(v) if isinstance(v, dict) else v.item() if isinstance(v, np.generic) else v
        for k, v in info.items()
    }


__all__ = ["overlapped_wave", "plain_info", "record_turn"]
