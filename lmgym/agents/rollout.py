"""Recording a turn into an episode, and the overlapped rollout.

``record_turn`` is what every rollout does with one env's step: the action, its reward and
info, and the next observation (or the end of the episode, with the final observation of a
truncated one when it fits the model's context).

``overlapped_episodes`` plays a ``collect``'s episodes in a ``ConcurrentVectorEnv`` with the HF
engine's decode loop, without waiting for the slowest env: when an env's turn is generated its
step (a tool call) starts in the vector env's thread pool and decoding goes on for the other
envs; when the step returns, its observation is prefilled into that env's KV-cache row and the
env rejoins the decode batch. An env whose episode is over starts the next one at once, so
there are no waves (continuous batching over episodes). Each episode samples from its own
random stream (``engines.uniforms``, keyed by episode and token position), so the episodes are
the ones the wave-by-wave rollout gives.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch

from lmgym.agents.engines import Generation, HFEngine, _splitmix64, sample
from lmgym.agents.trajectories import Episode, EpisodeBuilder
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
    if terminated or truncated:
        builder.terminated, builder.truncated = bool(terminated), bool(truncated and not terminated)
        if builder.truncated:  # the bootstrap state sees the final observation, if it fits
            final = agent.tokenizer.encode(obs)
            if len(builder.tokens) + len(final) <= limit:
                builder.add_observation(final)
        return None
    ids = agent.tokenizer.encode(obs)
    if len(builder.tokens) + len(ids) + contract["max_new_tokens"] > limit:  # the next turn would not fit
        builder.truncated = True
        builder.add_observation(ids[: max(0, limit - len(builder.tokens))])
        return None
    builder.add_observation(ids)
    return ids


def overlapped_episodes(
    agent: PPOAgent,
    vec: ConcurrentVectorEnv,
    seeds: list[int],
    keys: list[int],
    contract: dict[str, Any],
    group_size: int = 1,
) -> list[Episode]:
    """Plays one episode per seed (episode j: ``seeds[j]``, group ``j // group_size``, sampling
    stream ``keys[j]``) in ``vec``'s sub-envs, without waves: each env's reset and steps run in
    ``vec``'s thread pool as soon as they can, an env that ends its episode starts the next one,
    and the engine decodes for every env that is ready. Returns the episodes in seed order."""
    engine = agent.engine
    assert isinstance(engine, HFEngine)
    tok, budget, limit = agent.tokenizer, contract["max_new_tokens"], agent.max_context_tokens
    stops = contract["stop_strings"]
    kwargs = {**agent.config.sampling_kwargs, **contract.get("generation_kwargs", {})}
    envs = [cast(gym.Wrapper, env).env for env in vec.envs]  # past ConcurrentVectorEnv's Prefetched
    n = len(envs)
    todo = deque(range(len(seeds)))  # episodes not started
    playing: list[int | None] = [None] * n  # the episode each row (env) plays
    builders: dict[int, EpisodeBuilder] = {}
    turns: dict[int, Generation] = {}  # the rows decoding
    pending: dict[Future, tuple[int, Generation | None]] = {}  # rows in a reset (None) or a step
    ready: dict[int, list[int]] = {}  # the rows whose reset or step returned: the tokens they rejoin with

    def start(row: int) -> None:
        if todo:
            j = playing[row] = todo.popleft()
            pending[vec.pool.submit(envs[row].reset, seed=seeds[j])] = (row, None)
        else:
            playing[row] = None

    for row in range(n):
        start(row)
    engine.reset(n)
    logits = hidden = torch.zeros(0)
    with engine.decoding() as policy:
        while turns or pending or ready:
            feeds: list[list[int]] = [[] for _ in range(n)]
            if turns:
                rows = sorted(turns)
                positions = [len(builders[cast(int, playing[r])].tokens) + len(turns[r].tokens) for r in rows]
                picks = sample(logits[rows], kwargs, [keys[cast(int, playing[r])] for r in rows], positions)
                values = policy.value_head(hidden[rows].float()).squeeze(-1).tolist()
                for r, t, logprob, value in zip(rows, *picks, values):
                    g = turns[r]
                    g.add(t, logprob, value)
                    if ends_turn(g.tokens, tok, stops) or len(g.tokens) >= budget:
                        del turns[r]
                        pending[vec.pool.submit(envs[r].step, np.array(g.tokens, dtype=np.int64))] = (r, g)
                    else:
                        feeds[r] = [t]
            if pending and not any(feeds) and not ready:  # nothing to decode: wait for an env
                wait(pending, return_when=FIRST_COMPLETED)
            for future in [f for f in pending if f.done()]:
                r, turn = pending.pop(future)
                j = cast(int, playing[r])
                if turn is None:  # a reset: a new episode in this row, its old keys/values masked out
                    obs, _ = future.result()
                    b = builders[j] = EpisodeBuilder(tok.encode(obs) or [tok.eos_token_id], seeds[j], j // group_size)
                    check_prompt(b, budget, limit)
                    engine.forget(r)
                    ready[r] = list(b.tokens)
                    continue
                obs, reward, terminated, truncated, info = future.result()
                args = (turn.tokens, reward, terminated, truncated, plain_info(info), obs, contract)
                ids = record_turn(agent, builders[j], turn, *args)
                if ids is None:
                    start(r)
                else:  # rejoin with the turn's last token (never fed) and the observation
                    ready[r] = [turn.tokens[-1], *ids]
            if ready and len(ready) >= sum(map(bool, feeds)):  # together: a prefill pads every row to its width
                for r, ids in ready.items():
                    feeds[r] = ids
                    turns[r] = Generation([], [], [])
                ready.clear()
            if not any(feeds):
                continue
            if engine.mask.shape[1] > 2 * max(len(c) + len(f) for c, f in zip(engine.cached, feeds)) + 256:
                contexts = [c + f for c, f in zip(engine.cached, feeds)]  # compact: drop the masked slots
                engine.reset(n)
                feeds = contexts
            logits, hidden = engine.feed(policy.model, feeds)
    return [builders[j].build() for j in range(len(seeds))]


def check_prompt(builder: EpisodeBuilder, budget: int, limit: int) -> None:
    if len(builder.tokens) + budget > limit:
        raise ValueError(
            f"a prompt of {len(builder.tokens)} tokens plus a turn of {budget} does not fit the "
            f"model's context of {limit} tokens (seed {builder.seed})"
        )


def episode_key(base: int, j: int) -> int:
    """The sampling stream of the ``j``-th episode of a ``collect`` (``base`` drawn once per call)."""
    return _splitmix64(base + j)


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """A sub-env's info as a vector env's info reads back for it (numpy scalars as Python's)."""
    return {
        k: plain_info(v) if isinstance(v, dict) else v.item() if isinstance(v, np.generic) else v
        for k, v in info.items()
    }


__all__ = ["check_prompt", "episode_key", "overlapped_episodes", "plain_info", "record_turn"]
