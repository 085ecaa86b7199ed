"""The rollout: episodes from Gymnasium envs, played through a rollout engine.

``RolloutCollector`` plays episodes: in waves over a vector env (``run_episodes``: reset a
wave of envs, generate a turn for every env still playing, step them all, until every episode
of the wave is over), or overlapped (``overlapped_episodes``). It reads the env contract once per
env (``EnvContract``: tokenizer, stop strings, turn budget, autoreset mode) and leaves scoring to
the algorithm. Its engine (``lmgym.agents.engines.Engine``) is the one door for how tokens are
sampled: wrap it to sample otherwise. It never changes the envs it is given: a single env is
played through a ``Borrowed`` one-env vector env, a plain ``SyncVectorEnv``'s sub-envs through
guards of its own (``lmgym.vector.guarded``).

The overlapped rollout plays a ``collect``'s episodes in a ``ConcurrentVectorEnv`` with the HF
engine's per-row API, without waiting for the slowest env: when an env's turn is generated its
step (a tool call) starts in the vector env's thread pool and decoding goes on for the other
envs; when the step returns, the env's row of the KV cache is fed its observation and it rejoins
the decode batch. An env whose episode is over starts the next one at once, so there are no
waves. Each episode samples from its own random stream (``engines.sampling``), so the episodes
are the ones the wave-by-wave rollout gives.
"""

from __future__ import annotations

import copy
import weakref
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from lmgym.agents.engines import Engine, Generation, HFEngine, stream_key
from lmgym.agents.trajectories import Episode, EpisodeBuilder, Trajectories
from lmgym.core import EnvError
from lmgym.tokenizers import as_tokenizer
from lmgym.vector import Borrowed, ConcurrentVectorEnv, Guarded, guarded

if TYPE_CHECKING:
    from lmgym.agents.config import RolloutConfig
    from lmgym.tokenizers import Tokenizer

EVAL_SEED_OFFSET = 2**30
"""Training episodes draw reset seeds below this; held-out evaluation seeds start here."""


@dataclass(frozen=True)
class EnvContract:
    """What the collector reads of an env, once (``RolloutCollector.env_contract``)."""

    stop_strings: tuple[str, ...]
    """Strings that end a turn (the env's, its tools' closing tags, a chat template's end of turn)."""
    max_new_tokens: int
    """The turn budget: ``RolloutConfig.max_new_tokens``, else the env's ``max_action_tokens``."""
    autoreset: AutoresetMode
    env_id: str | None
    """The registered id, named in errors."""


@dataclass(frozen=True)
class Play:
    """How one ``collect`` plays its episodes: the env contract, the call's generation kwargs,
    the group size and the policy version tagged on the tokens."""

    contract: EnvContract
    generation_kwargs: dict[str, Any]
    group_size: int
    version: int


class RolloutCollector:
    """Plays episodes from Gymnasium envs through a rollout engine.

    Args:
        engine: the rollout engine (``lmgym.agents.engines.Engine``): what samples the tokens.
        tokenizer: the agent's tokenizer (the env's must match it).
        rollout: how episodes are played (``PPOConfig.rollout``: budgets, deadlines, the
            overlapped rollout), read at each collect.
        max_context_tokens: the longest episode context (the model's positions).
        group_size: episodes per task, unless ``collect`` is told otherwise.
        seed: seeds the training episodes' reset seeds (with ``rank``: they differ by process).
        rank: the process's rank.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Tokenizer,
        rollout: RolloutConfig,
        max_context_tokens: int = 2048,
        group_size: int = 1,
        seed: int = 0,
        rank: int = 0,
    ):
        self.engine, self.tokenizer, self.rollout, self.group_size = engine, tokenizer, rollout, group_size
        self.max_context_tokens = int(rollout.max_context_tokens or max_context_tokens)
        self.seed_rng = np.random.default_rng([seed, rank])
        self.views: weakref.WeakKeyDictionary[Any, VectorEnv] = weakref.WeakKeyDictionary()
        self.contracts: weakref.WeakKeyDictionary[Any, EnvContract] = weakref.WeakKeyDictionary()

    def with_engine(self, engine: Engine) -> RolloutCollector:
        """This collector with another engine (the overlapped update's own), sharing its seeds' RNG."""
        other = copy.copy(self)
        other.engine = engine
        return other

    def state_dict(self) -> dict[str, Any]:
        """The training seeds' RNG, as plain values."""
        return {"seed_rng": self.seed_rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed_rng.bit_generator.state = state["seed_rng"]

    # ------------------------------------------------------------------------------- collect
    def collect(
        self,
        envs: gym.Env | VectorEnv,
        num_episodes: int,
        group_size: int | None = None,
        seeds: Sequence[int] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        version: int = 0,
        keys: Sequence[int] | None = None,
    ) -> Trajectories:
        """Runs ``num_episodes`` episodes and returns them, unscored (``PPOAgent.collect`` scores them).

        Args:
            envs: a Gymnasium ``VectorEnv`` (either autoreset mode), or a single env.
            num_episodes: how many episodes.
            group_size: episodes per task: each group of k envs is reset with the same seed
                (defaults to the collector's); ``num_envs`` must be a multiple of it.
            seeds: explicit reset seeds, one per task (e.g. held-out evaluation seeds).
            generation_kwargs: overrides of ``rollout.generation_kwargs`` for these episodes
                (``{"do_sample": False}`` for greedy evaluation).
            version: the policy version sampling them (updates done), tagged on each action token.
            keys: the sampling stream of each episode (``engines.sampling.stream_key``); by default
                drawn from torch's global RNG. Evaluation keys each by its seed, so that an episode's
                sample does not depend on the batch it is played in, nor touch the training's RNG.
        """
        vec = self.view(envs)
        subs = cast(list[Guarded], [e for e in getattr(vec, "envs", []) if isinstance(e, Guarded)])
        before = sum((g.faults for g in subs), Counter())
        contract, kwargs = self.env_contract(envs), dict(generation_kwargs or {})
        k = group_size or self.group_size
        if vec.num_envs % k or num_episodes % k:
            raise ValueError(f"group_size {k} must divide num_envs ({vec.num_envs}) and num_episodes ({num_episodes})")
        task_seeds = list(seeds) if seeds is not None else self.next_seeds(num_episodes // k)
        if len(task_seeds) * k < num_episodes:
            raise ValueError(f"{len(task_seeds)} seeds for {num_episodes} episodes in groups of {k}")
        episode_seeds = [s for s in task_seeds[: num_episodes // k] for _ in range(k)]
        if keys is None:  # episode j samples from stream stream_key(base_key, j)
            base_key = int(torch.randint(0, 2**62, (1,)))
            keys = [stream_key(base_key, j) for j in range(num_episodes)]
        keys = list(keys)
        plays = Play(contract, kwargs, k, version)
        if self.overlaps(vec, kwargs):
            episodes = self.overlapped_episodes(cast(ConcurrentVectorEnv, vec), episode_seeds, keys, plays)
        else:
            episodes = []
        while len(episodes) < num_episodes:
            wave = slice(len(episodes), len(episodes) + min(vec.num_envs, num_episodes - len(episodes)))
            episodes += self.run_episodes(vec, episode_seeds[wave], plays, len(episodes) // k, keys[wave])
        new = sum((g.faults for g in subs), Counter()) - before
        kept = self.drop_failed(episodes)
        faults = {
            "timeouts": new["timeouts"],
            "reset_timeouts": new["reset_timeouts"],
            "skipped": len(episodes) - len(kept),
        }
        return Trajectories(kept, self.tokenizer, faults, contract.max_new_tokens)

    def view(self, envs: gym.Env | VectorEnv) -> VectorEnv:
        """The vector env the collector plays ``envs`` through, made once per env and kept:
        ``envs`` itself when it guards its sub-envs (a ``ConcurrentVectorEnv``), else a guarded
        view that leaves it as it is (``lmgym.vector.guarded``; a single env in a one-env
        ``Borrowed`` vector env, same-step autoreset)."""
        view = self.views.get(envs)
        if view is None:
            timeout, on_error = self.rollout.step_timeout, self.rollout.on_env_error
            view = guarded(as_vector_env(envs), timeout, on_error)
            self.views[envs] = view
        return view

    def drop_failed(self, episodes: list[Episode]) -> list[Episode]:
        """The episodes without an env error (``on_env_error="skip"``), whole groups dropped;
        ``EnvError`` when more than ``max_env_errors`` of them failed."""
        failed = [e for e in episodes if e.infos and "env_error" in e.infos[-1]]
        if not failed:
            return episodes
        groups = {e.group for e in failed}
        kept = [e for e in episodes if e.group not in groups]
        limit = self.rollout.max_env_errors
        if not kept or len(episodes) - len(kept) > limit * len(episodes):
            raise EnvError(
                f"{len(episodes) - len(kept)} of {len(episodes)} episodes dropped for env errors, more than "
                f"max_env_errors={limit:g} of them; the first: {failed[0].infos[-1]['env_error']}"
            )
        return kept

    def next_seeds(self, n: int) -> list[int]:
        """Fresh training seeds (below ``EVAL_SEED_OFFSET``), reproducible from the seed."""
        return [int(s) for s in self.seed_rng.integers(0, EVAL_SEED_OFFSET, size=n)]

    def env_contract(self, envs: gym.Env | VectorEnv) -> EnvContract:
        """The env's ``EnvContract``, read and checked once (the tokenizer must be the agent's;
        the turn budget must fit the action space)."""
        contract = self.contracts.get(envs)
        if contract is not None:
            return contract
        vec = as_vector_env(envs)
        env_tok = as_tokenizer(_attr(vec, "tokenizer"))
        mine = self.tokenizer
        if (env_tok.vocab_size, env_tok.eos_token_id) != (mine.vocab_size, mine.eos_token_id):
            raise ValueError(
                f"the env's tokenizer (vocab_size={env_tok.vocab_size}, eos={env_tok.eos_token_id}) does not "
                f"match the agent's (vocab_size={mine.vocab_size}, eos={mine.eos_token_id}): make the env with "
                "tokenizer=agent.tokenizer"
            )
        max_tokens = int(_attr(vec, "max_action_tokens", getattr(vec.single_action_space, "max_length", 64)))
        budget = self.rollout.max_new_tokens
        if budget is not None and budget > max_tokens:
            raise ValueError(f"max_new_tokens={budget} is more than the env's max_action_tokens={max_tokens}")
        contract = self.contracts[envs] = EnvContract(
            stop_strings=tuple(_attr(vec, "stop_strings", ())),
            max_new_tokens=int(budget or max_tokens),
            autoreset=vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP),
            env_id=env_id_of(vec),
        )
        return contract

    # ---------------------------------------------------------------------------------- waves
    def run_episodes(
        self, vec: VectorEnv, seeds: list[int], play: Play, first_group: int = 0, keys: list[int] | None = None
    ) -> list[Episode]:
        """One wave: resets the first ``len(seeds)`` envs with those seeds and plays each of them
        for one episode, generating in a batch over the envs still playing. Envs whose episode
        is over get a one-token EOS action and their transitions are ignored. ``keys``: each
        episode's sampling stream (drawn from torch's RNG when not given)."""
        n, k, tok, contract = vec.num_envs, play.group_size, self.tokenizer, play.contract
        with named_vector_errors(contract.env_id, seeds):
            obs, reset_infos = vec.reset(seed=cast(Any, seeds + [None] * (n - len(seeds))))  # one seed per sub-env
        builders = [
            EpisodeBuilder(
                tok.encode(obs[i]) or [tok.eos_token_id], seeds[i], first_group + i // k, info_at(reset_infos, i)
            )
            for i in range(len(seeds))
        ]
        live = list(range(len(seeds)))
        idle = np.array([tok.eos_token_id], dtype=np.int64)
        for b in builders:
            self.check_prompt(b, contract.max_new_tokens)
        keys = keys or torch.randint(0, 2**62, (len(seeds),)).tolist()
        self.engine.reset()  # a new wave: no cached keys/values carry over
        same_step = contract.autoreset == AutoresetMode.SAME_STEP
        while live:
            turns = self.turns([builders[i].tokens for i in live], [keys[i] for i in live], play)
            batch = [idle] * n
            actions = {i: list(turn.tokens or [tok.eos_token_id]) for i, turn in zip(live, turns)}  # as sampled
            for i, action in actions.items():
                batch[i] = np.array(action, dtype=np.int64)
            with named_vector_errors(contract.env_id, seeds):
                obs, rewards, terminated, truncated, infos = vec.step(tuple(batch))
            for i, turn in zip(list(live), turns):
                ended = bool(terminated[i] or truncated[i])
                final = infos["final_obs"][i] if ended and same_step else obs[i]
                info = step_info(infos, i, ended and same_step)
                args = (rewards[i], terminated[i], truncated[i], info, final, contract)
                if self.record_turn(builders[i], turn, actions[i], *args) is None:
                    live.remove(i)
        return [b.build(play.version) for b in builders]

    def turns(self, contexts: list[list[int]], keys: list[int], play: Play) -> list[Generation]:
        """One turn per context through the engine, as ``Generation``s."""
        stops, budget = play.contract.stop_strings, play.contract.max_new_tokens
        out = self.engine.generate(contexts, stops, budget, keys=keys, **play.generation_kwargs)
        return [g if isinstance(g, Generation) else Generation(g) for g in out]

    def record_turn(
        self,
        builder: EpisodeBuilder,
        turn: Generation,
        action: list[int],
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
        obs: str,
        contract: EnvContract,
    ) -> list[int] | None:
        """Adds one step to ``builder``; ``obs`` is the next observation (the final one when the
        episode ended). Returns the observation's ids when the episode goes on, else ``None``."""
        exact = self.engine.exact and bool(turn.tokens) and turn.logprobs is not None
        builder.add_action(
            action,
            float(reward),
            info,
            logprobs=turn.logprobs if exact else None,
            values=turn.values if exact else None,
            sampler_logprobs=turn.logprobs if not exact and turn.tokens else None,
        )
        builder.budget_cut |= len(action) >= contract.max_new_tokens
        limit = self.max_context_tokens
        if terminated or truncated:
            builder.terminated, builder.truncated = bool(terminated), bool(truncated and not terminated)
            if builder.truncated:  # the bootstrap state sees the final observation, if it fits
                final = self.tokenizer.encode(obs)
                if len(builder.tokens) + len(final) <= limit:
                    builder.add_observation(final)
            return None
        ids = self.tokenizer.encode(obs)
        if len(builder.tokens) + len(ids) + contract.max_new_tokens > limit:  # the next turn would not fit
            builder.truncated = True
            builder.add_observation(ids[: max(0, limit - len(builder.tokens))])
            return None
        builder.add_observation(ids)
        return ids

    def check_prompt(self, builder: EpisodeBuilder, budget: int) -> None:
        if len(builder.tokens) + budget > self.max_context_tokens:
            raise ValueError(
                f"a prompt of {len(builder.tokens)} tokens plus a turn of {budget} does not fit the "
                f"model's context of {self.max_context_tokens} tokens (seed {builder.seed})"
            )

    # ----------------------------------------------------------------------------- overlapped
    def overlaps(self, vec: VectorEnv, generation_kwargs: dict[str, Any]) -> bool:
        """Whether ``collect`` overlaps generation with env steps here: ``rollout.overlap``, a
        ``ConcurrentVectorEnv``, and the HF engine's own decode loop (lean generation kwargs)."""
        kwargs = {**self.rollout.sampling_kwargs, **generation_kwargs}
        return (
            self.rollout.overlap
            and isinstance(vec, ConcurrentVectorEnv)
            and isinstance(self.engine, HFEngine)
            and HFEngine.lean(kwargs)
        )

    def overlapped_episodes(
        self, vec: ConcurrentVectorEnv, seeds: list[int], keys: list[int], play: Play
    ) -> list[Episode]:
        """Plays one episode per seed (episode j: ``seeds[j]``, group ``j // group_size``, sampling
        stream ``keys[j]``) in ``vec``'s sub-envs, without waves: each env's reset and steps run in
        ``vec``'s thread pool as soon as they can, an env that ends its episode starts the next one,
        and the engine decodes for every env that is ready. Returns the episodes in seed order."""
        engine = cast(HFEngine, self.engine)
        tok, budget, stops = self.tokenizer, play.contract.max_new_tokens, play.contract.stop_strings
        kwargs = {**self.rollout.sampling_kwargs, **play.generation_kwargs}
        envs = cast(list[Guarded], vec.envs)  # their steps run here, not through vec.step
        todo = deque(range(len(seeds)))  # episodes not started
        playing: list[int] = [-1] * len(envs)  # the episode each row (env) plays
        builders: dict[int, EpisodeBuilder] = {}
        pending: dict[Future, tuple[int, Generation | None]] = {}  # rows in a reset (None) or a step
        ready: dict[int, list[int]] = {}  # rows whose reset or step returned: the tokens they rejoin with

        def start(row: int) -> None:
            if todo:
                j = playing[row] = todo.popleft()
                pending[vec.pool.submit(envs[row].reset, seed=seeds[j])] = (row, None)

        for row in range(len(envs)):
            start(row)
        engine.reset(len(envs))
        with engine.decoding():
            while engine.turns or pending or ready:
                for r, done in engine.step(kwargs, stops, budget).items():
                    action = np.array(done.tokens, dtype=np.int64)
                    pending[vec.pool.submit(Guarded.step, envs[r], action)] = (r, done)
                if pending and not engine.turns and not ready:  # nothing to decode: wait for an env
                    wait(pending, return_when=FIRST_COMPLETED)
                for future in [f for f in pending if f.done()]:
                    r, turn = pending.pop(future)
                    j = playing[r]
                    if turn is None:  # a reset: a new episode in this row, its old keys/values masked out
                        obs, reset_info = future.result()
                        b = builders[j] = EpisodeBuilder(
                            tok.encode(obs) or [tok.eos_token_id], seeds[j], j // play.group_size, reset_info
                        )
                        self.check_prompt(b, budget)
                        engine.forget(r)
                        ready[r] = list(b.tokens)
                        continue
                    obs, reward, terminated, truncated, info = future.result()
                    args = (reward, terminated, truncated, plain_info(info), obs, play.contract)
                    ids = self.record_turn(builders[j], turn, list(turn.tokens), *args)
                    if ids is None:
                        start(r)
                    else:  # rejoin with the turn's last token (never fed) and the observation
                        ready[r] = [turn.tokens[-1], *ids]
                if ready and len(ready) >= len(engine.turns):  # together: a prefill pads every row to its width
                    for r, ids in ready.items():
                        engine.begin(r, ids, keys[playing[r]])
                    ready.clear()
                engine.flush()
        return [builders[j].build(play.version) for j in range(len(seeds))]


# ------------------------------------------------------------------------------------ helpers
@contextmanager
def named_vector_errors(env_id: str | None, seeds: list[int]) -> Iterator[None]:
    """An error of a vector env whose sub-envs are not guarded (an ``AsyncVectorEnv``'s, raised
    from another process) as an ``EnvError`` naming the env and the wave's seeds."""
    try:
        yield
    except EnvError:
        raise
    except Exception as e:
        raise EnvError(
            f"the vector env raised {type(e).__name__}: {str(e)[:500]} (a sub-env of the wave of seeds {seeds[:8]})",
            env_id=env_id,
        ) from e


def plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """A sub-env's info as a vector env's info reads back for it (numpy scalars as Python's)."""
    return {
        k: plain_info(v) if isinstance(v, dict) else v.item() if isinstance(v, np.generic) else v
        for k, v in info.items()
    }


def as_vector_env(envs: gym.Env | VectorEnv) -> VectorEnv:
    """A vector env as is; a single env in a one-env ``Borrowed`` vector env (SAME_STEP), which
    leaves the env open when it is closed or dropped."""
    if isinstance(envs, VectorEnv):
        return envs
    if isinstance(envs, gym.Env):
        return Borrowed([lambda: envs], autoreset_mode=AutoresetMode.SAME_STEP)
    raise TypeError(f"expected a gymnasium Env or VectorEnv, got {type(envs).__name__}")


def env_id_of(envs: gym.Env | VectorEnv) -> str | None:
    """The registered id of an env or vector env, if it has one. Read from the unwrapped env where
    it can be: a wrapper's ``spec`` deep-copies the spec, tokenizer and all, each time it is read."""
    if isinstance(envs, gym.Env):
        return getattr(envs.unwrapped.spec, "id", None)
    subs = getattr(envs.unwrapped, "envs", None)  # SyncVectorEnv, ConcurrentVectorEnv: the first sub-env's
    spec = envs.spec or (subs[0].unwrapped.spec if subs else _attr(envs, "spec", None))
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


__all__ = ["EVAL_SEED_OFFSET", "EnvContract", "RolloutCollector", "as_vector_env", "env_id_of", "plain_info"]
