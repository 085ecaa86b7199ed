"""The overlapped rollout: generation goes on while some envs are in their step, and the episodes
are the ones the step-by-step rollout gives (sequential, concurrent and overlapped alike)."""

import copy
import time

import gymnasium as gym
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import tiny_model

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.engines import uniforms
from lmgym.agents.rollout import RolloutCollector
from lmgym.tokenizers import ByteTokenizer
from lmgym.vector import ConcurrentVectorEnv

pytestmark = pytest.mark.timeout(900)


def slow_step(k):
    """A pipeline stage that takes 0-40 ms depending on what the model wrote, like a tool."""

    def stage(out):
        time.sleep(0.01 * (len(out) % 5))
        return f"\nstep {k}: {out[:2]!r}, {len(out)} bytes; again:"

    return stage


def make_env():
    return gym.make("lmgym/Pipeline-v0", transforms=[slow_step(k) for k in range(3)], max_action_tokens=10)


def collect(vec_class, overlap, generation_kwargs=None, group_size=None):
    model = tiny_model(258, 256, seed=5, n_layer=2, n_embd=32, n_positions=256)
    config = PPOConfig(seed=0, rollout={"overlap": overlap})
    agent = PPOAgent(copy.deepcopy(model), tokenizer=ByteTokenizer(), config=config)
    envs = vec_class([make_env] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    torch.manual_seed(7)
    batch = agent.collect(envs, 8, group_size=group_size, seeds=list(range(8)), generation_kwargs=generation_kwargs)
    envs.close()
    return batch


@pytest.mark.parametrize(
    "generation_kwargs,group_size",
    [(None, None), ({"temperature": 0.7, "top_k": 50}, 2), ({"do_sample": False}, None)],
)
def test_sequential_concurrent_and_overlapped_rollouts_give_identical_episodes(
    monkeypatch, generation_kwargs, group_size
):
    waves = []
    overlapped = RolloutCollector.overlapped_episodes
    monkeypatch.setattr(RolloutCollector, "overlapped_episodes", lambda *a: waves.append(1) or overlapped(*a))
    runs = [
        collect(SyncVectorEnv, True, generation_kwargs, group_size),
        collect(ConcurrentVectorEnv, False, generation_kwargs, group_size),
    ]
    assert not waves  # neither of those overlaps
    runs.append(collect(ConcurrentVectorEnv, True, generation_kwargs, group_size))
    assert len(waves) == 1  # 8 episodes in 4 envs, without waves
    reference = runs[0].episodes
    assert all(len(e.turn_ends) == 4 for e in reference)  # four model calls, three slow steps
    assert len({tuple(e.tokens.tolist()) for e in reference}) > 1
    for batch in runs[1:]:
        for a, b in zip(reference, batch.episodes):
            assert torch.equal(a.tokens, b.tokens) and torch.equal(a.action_mask, b.action_mask)
            assert (a.rewards, a.turn_ends, a.seed, a.group) == (b.rewards, b.turn_ends, b.seed, b.group)
            assert (a.terminated, a.truncated, a.infos) == (b.terminated, b.truncated, b.infos)
            torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
            torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=0)


def test_the_overlapped_rollout_does_not_wait_for_the_slowest_env():
    def stage(out):
        time.sleep(0.5 if stage.calls % 4 == 0 else 0.0)  # one env of each four is slow
        stage.calls += 1
        return "\nagain:"

    stage.calls = 0
    make = lambda: gym.make("lmgym/Pipeline-v0", transforms=[stage] * 2, max_action_tokens=6)  # noqa: E731
    model = tiny_model(258, 256, seed=1, n_layer=1, n_embd=16)
    agent = PPOAgent(model, tokenizer=ByteTokenizer(), config=PPOConfig(rollout={"overlap": True}))
    envs = ConcurrentVectorEnv([make] * 4)
    feeds = []
    flush = agent.engine.flush
    engine = agent.engine

    def recording_flush():
        feeds.append([bool(engine.queued.get(r)) for r in range(len(engine.cached))])
        flush()

    agent.engine.flush = recording_flush
    batch = agent.collect(envs, 4, seeds=[0, 1, 2, 3])
    assert all(len(e.turn_ends) == 3 for e in batch.episodes)
    # the envs that were not waiting on the slow step kept decoding while it ran
    assert any(sum(row) not in (0, 4) for row in feeds)
    envs.close()


def test_each_episode_samples_from_its_own_stream():
    u = uniforms([1, 1, 2], [5, 6, 5])
    assert torch.all((u >= 0) & (u < 1)) and len(set(u.tolist())) == 3
    assert torch.equal(uniforms([2, 1], [5, 6]), u[[2, 1]])  # a function of (key, position) only
    draws = uniforms([3] * 20000, range(20000))
    assert abs(draws.mean().item() - 0.5) < 0.01 and abs(draws.std().item() - (1 / 12) ** 0.5) < 0.01
