"""The rollout: episodes from Gymnasium envs, played through a rollout engine.

``Rollout`` is the half of ``PPOAgent`` that plays episodes (``collect``, ``run_episodes``,
``generate_turns``, the env contract); ``lmgym.agents.ppo`` holds the algorithm (scoring,
advantages, the update and its loss, ``learn``), as SB3 splits rollout collection from training.

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

import inspect
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from lmgym.agents.engines import Generation, HFEngine, _splitmix64, sample
from lmgym.agents.trajectories import Episode, EpisodeBuilder, Trajectories
from lmgym.core import ends_turn
from lmgym.tokenizers import as_tokenizer
from lmgym.vector import ConcurrentVectorEnv

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from lmgym.agents.config import PPOConfig
    from lmgym.agents.engines import Engine
    from lmgym.tokenizers import Tokenizer

EVAL_SEED_OFFSET = 2**30
"""Training episodes draw reset seeds below this; held-out evaluation seeds start here."""


def record_turn(
    agent: Rollout,
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
    agent: Rollout,
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


class Rollout:
    """The rollout half of ``PPOAgent``: episodes from Gymnasium envs through the rollout engine.

    ``collect`` plays episodes (in waves over a vector env, ``run_episodes``, or overlapped,
    ``overlapped_episodes``), reads the env contract (tokenizer, stop strings, turn budget),
    and leaves scoring to the algorithm (``score``). Each stage is a method to override.
    """

    config: PPOConfig
    tokenizer: Tokenizer
    engine: Engine
    seed_rng: np.random.Generator
    accelerator: Any
    policy: Any

    def score(self, episodes: Iterable[Episode]) -> None:
        """Old log-probs, values and reference log-probs for ``collect``'s episodes (the algorithm's)."""
        raise NotImplementedError

    @property
    def model(self) -> PreTrainedModel:
        """The causal LM being trained (unwrapped from accelerate)."""
        return self.accelerator.unwrap_model(self.policy).model

    @property
    def max_context_tokens(self) -> int:
        limit = self.config.max_context_tokens or getattr(self.model.config, "max_position_embeddings", None)
        return int(limit or 2048)

    # ------------------------------------------------------------------------------ generate
    def generate_turns(
        self,
        contexts: list[list[int]],
        stop_strings: Sequence[str],
        max_new_tokens: int,
        keys: Sequence[int] | None = None,
        **generation_kwargs: Any,
    ) -> list[Generation]:
        """One turn for each context through the rollout engine (``config.engine``): the sampled
        ids, each turn ended by EOS, a stop string or ``max_new_tokens``, with the sampler's
        log-probs (and values, from the HF engine). ``config.generation_kwargs`` apply, and
        ``generation_kwargs`` override them for this call. ``keys`` (one per context: ``collect``
        gives one per episode) make the HF engine sample each row from its own random stream."""
        if type(self).generate is not Rollout.generate:  # a subclass's own generate wins
            return [
                Generation(ids) for ids in self.generate(contexts, stop_strings, max_new_tokens, **generation_kwargs)
            ]
        if keys is not None and "keys" in inspect.signature(self.engine.generate).parameters:
            generation_kwargs = {**generation_kwargs, "keys": keys}  # an engine written without keys gets none
        return self.engine.generate(contexts, stop_strings, max_new_tokens, **generation_kwargs)

    def generate(
        self, contexts: list[list[int]], stop_strings: Sequence[str], max_new_tokens: int, **generation_kwargs: Any
    ) -> list[list[int]]:
        """One turn for each context: the sampled action ids (see ``generate_turns``)."""
        return [g.tokens for g in self.engine.generate(contexts, stop_strings, max_new_tokens, **generation_kwargs)]

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
        """Runs ``num_episodes`` episodes and returns them, scored (old and reference log-probs,
        values).

        Args:
            envs: a Gymnasium ``VectorEnv`` (either autoreset mode), or a single env.
            num_episodes: how many episodes.
            group_size: episodes per task: each group of k envs is reset with the same seed
                (defaults to ``config.group_size``); ``num_envs`` must be a multiple of it.
            seeds: explicit reset seeds, one per task (e.g. held-out evaluation seeds).
            generation_kwargs: overrides of ``config.generation_kwargs`` for these episodes
                (``{"do_sample": False}`` for greedy evaluation).
            score: compute log-probs and values (``update`` needs them; evaluation does not).
        """
        vec = as_vector_env(envs)
        contract = self.env_contract(vec)
        contract["generation_kwargs"] = dict(generation_kwargs or {})
        k = group_size or self.config.group_size or 1
        if vec.num_envs % k or num_episodes % k:
            raise ValueError(f"group_size {k} must divide num_envs ({vec.num_envs}) and num_episodes ({num_episodes})")
        task_seeds = list(seeds) if seeds is not None else self.next_seeds(num_episodes // k)
        if len(task_seeds) * k < num_episodes:
            raise ValueError(f"{len(task_seeds)} seeds for {num_episodes} episodes in groups of {k}")
        base_key = int(torch.randint(0, 2**62, (1,)))  # episode j samples from stream episode_key(base_key, j)
        if self.overlaps(vec, contract):
            episode_seeds = [s for s in task_seeds[: num_episodes // k] for _ in range(k)]
            keys = [episode_key(base_key, j) for j in range(num_episodes)]
            episodes = overlapped_episodes(self, cast(ConcurrentVectorEnv, vec), episode_seeds, keys, contract, k)
        else:
            episodes = []
        while len(episodes) < num_episodes:
            wave = min(vec.num_envs, num_episodes - len(episodes)) // k
            first_group = len(episodes) // k
            wave_seeds = [s for s in task_seeds[first_group : first_group + wave] for _ in range(k)]
            keys = [episode_key(base_key, len(episodes) + i) for i in range(len(wave_seeds))]
            episodes += self.run_episodes(vec, wave_seeds, contract, k, first_group, keys)
        if score:
            self.score(episodes)
        return Trajectories(episodes, self.tokenizer)

    def next_seeds(self, n: int) -> list[int]:
        """Fresh training seeds (below ``EVAL_SEED_OFFSET``), reproducible from ``config.seed``."""
        return [int(s) for s in self.seed_rng.integers(0, EVAL_SEED_OFFSET, size=n)]

    def env_contract(self, vec: VectorEnv) -> dict[str, Any]:
        """Reads the env's tokenizer, stop strings and turn budget, and checks the tokenizer."""
        env_tok = as_tokenizer(_attr(vec, "tokenizer"))
        mine = self.tokenizer
        if (env_tok.vocab_size, env_tok.eos_token_id) != (mine.vocab_size, mine.eos_token_id):
            raise ValueError(
                f"the env's tokenizer (vocab_size={env_tok.vocab_size}, eos={env_tok.eos_token_id}) does not "
                f"match the agent's (vocab_size={mine.vocab_size}, eos={mine.eos_token_id}): make the env with "
                "tokenizer=agent.tokenizer"
            )
        space = vec.single_action_space
        max_tokens = int(_attr(vec, "max_action_tokens", getattr(space, "max_length", 64)))
        if self.config.max_new_tokens is not None and self.config.max_new_tokens > max_tokens:
            raise ValueError(
                f"max_new_tokens={self.config.max_new_tokens} is more than the env's max_action_tokens={max_tokens}"
            )
        return {
            "stop_strings": tuple(_attr(vec, "stop_strings", ())),
            "max_new_tokens": int(self.config.max_new_tokens or max_tokens),
            "autoreset": vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP),
        }

    def run_episodes(
        self,
        vec: VectorEnv,
        seeds: list[int],
        contract: dict[str, Any],
        group_size: int = 1,
        first_group: int = 0,
        keys: list[int] | None = None,
    ) -> list[Episode]:
        """One wave: resets the first ``len(seeds)`` envs with those seeds and plays each of them
        for one episode, generating in a batch over the envs still playing. Envs whose episode
        is over get a one-token EOS action and their transitions are ignored. ``keys``: each
        episode's sampling stream (drawn from torch's RNG when not given)."""
        n, k = vec.num_envs, group_size
        obs, _ = vec.reset(seed=cast(Any, seeds + [None] * (n - len(seeds))))  # one seed per sub-env
        builders = [
            EpisodeBuilder(
                self.tokenizer.encode(obs[i]) or [self.tokenizer.eos_token_id], seeds[i], first_group + i // k
            )
            for i in range(len(seeds))
        ]
        live = list(range(len(seeds)))
        idle = np.array([self.tokenizer.eos_token_id], dtype=np.int64)
        budget, limit = contract["max_new_tokens"], self.max_context_tokens
        for b in builders:
            check_prompt(b, budget, limit)
        keys = keys or torch.randint(0, 2**62, (len(seeds),)).tolist()
        self.engine.reset()  # a new wave: no cached keys/values carry over
        while live:
            turns = self.generate_turns(
                [builders[i].tokens for i in live],
                contract["stop_strings"],
                budget,
                [keys[i] for i in live],
                **contract.get("generation_kwargs", {}),
            )
            batch = [idle] * n
            for i, turn in zip(live, turns):
                batch[i] = np.array(turn.tokens or [self.tokenizer.eos_token_id], dtype=np.int64)
            obs, rewards, terminated, truncated, infos = vec.step(tuple(batch))
            same_step = contract["autoreset"] == AutoresetMode.SAME_STEP
            for i, turn in zip(list(live), turns):
                ended = bool(terminated[i] or truncated[i])
                final = infos["final_obs"][i] if ended and same_step else obs[i]
                info = step_info(infos, i, ended and same_step)
                args = (batch[i].tolist(), rewards[i], terminated[i], truncated[i], info, final, contract)
                if record_turn(self, builders[i], turn, *args) is None:
                    live.remove(i)
        return [b.build() for b in builders]

    def overlaps(self, vec: VectorEnv, contract: dict[str, Any]) -> bool:
        """Whether ``collect`` overlaps generation with env steps here: ``config.overlap_rollout``,
        a ``ConcurrentVectorEnv``, and the HF engine's own decode loop (lean generation kwargs,
        no ``generate``/``generate_turns`` override)."""
        kwargs = {**self.config.sampling_kwargs, **contract.get("generation_kwargs", {})}
        return (
            self.config.overlap_rollout
            and isinstance(vec, ConcurrentVectorEnv)
            and isinstance(self.engine, HFEngine)
            and HFEngine.lean(kwargs)
            and type(self).generate is Rollout.generate
            and type(self).generate_turns is Rollout.generate_turns
        )


# ------------------------------------------------------------------------------------ helpers
def as_vector_env(envs: gym.Env | VectorEnv) -> VectorEnv:
    """A vector env as is; a single env wrapped in a one-env ``SyncVectorEnv`` (SAME_STEP)."""
    if isinstance(envs, VectorEnv):
        return envs
    if isinstance(envs, gym.Env):
        vec = getattr(envs, "_lmgym_vector", None)  # kept: a dropped vector env would close the user's env
        if vec is None:
            vec = SyncVectorEnv([lambda: envs], autoreset_mode=AutoresetMode.SAME_STEP)
            envs._lmgym_vector = vec  # type: ignore[attr-defined]
        return vec
    raise TypeError(f"expected a gymnasium Env or VectorEnv, got {type(envs).__name__}")


def env_id_of(envs: gym.Env | VectorEnv) -> str | None:
    """The registered id of an env or vector env, if it has one."""
    spec = getattr(envs, "spec", None)
    if spec is None and isinstance(envs, VectorEnv):
        spec = _attr(envs, "spec", None)
    return getattr(spec, "id", None)


_MISSING = object()


def _attr(vec: VectorEnv, name: str, default: Any = _MISSING) -> Any:
    try:
        return cast(Any, vec).get_attr(name)[0]  # every Gymnasium vector env has get_attr
    except AttributeError:
        if default is _MISSING:
            raise AttributeError(f"the env has no {name!r} attribute (the lmgym env contract needs it)") from None
        return default


def info_at(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Env ``i``'s info from a vector env's batched info dict."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        present = infos.get(f"_{key}")
        if present is None or present[i]:
            out[key] = info_at(value, i) if isinstance(value, dict) else _plain(value[i])
    return out


def step_info(infos: dict[str, Any], i: int, autoreset_same_step: bool) -> dict[str, Any]:
    """Env ``i``'s info of this step. When its episode ended under SAME_STEP autoreset, the
    top-level info is the next episode's reset info and this step's is in ``final_info``."""
    if autoreset_same_step and "final_info" in infos and infos.get("_final_info", [True] * (i + 1))[i]:
        return info_at(infos["final_info"], i)
    return info_at(infos, i)


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x
