import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import batch_space

import lmgym  # noqa: F401
from lmgym.spaces import AnyText, TokenSequence


def test_token_sequence_contains_and_sample():
    space = TokenSequence(vocab_size=5, max_length=3, seed=0)
    assert space.contains(np.array([0, 4, 2]))
    assert space.contains(np.array([], dtype=np.int64))
    assert not space.contains(np.array([0, 5]))  # id outside the vocabulary
    assert not space.contains(np.array([1, 1, 1, 1]))  # too long
    assert not space.contains(np.array([1.0, 2.0]))  # wrong dtype
    for _ in range(50):
        x = space.sample()
        assert x.dtype == np.int64 and 1 <= len(x) <= 3 and space.contains(x)


def test_token_sequence_batch_space():
    batched = batch_space(TokenSequence(7, 4), n=3)
    sample = batched.sample()
    assert len(sample) == 3 and all(TokenSequence(7, 4).contains(s) for s in sample)
    assert batched.contains(sample)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_action_space(mode):
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=2, vectorization_mode=mode)
    assert envs.single_action_space == TokenSequence(258, 8)
    envs.reset(seed=0)
    _, rewards, terminated, _, _ = envs.step(envs.action_space.sample())
    assert terminated.all() and rewards.shape == (2,)
    envs.close()


def test_anytext_accepts_unicode_and_bounds_length():
    space = AnyText(max_length=20)
    assert space.contains("naïve café 東京")
    assert space.contains("")
    assert not space.contains("x" * 21)
    assert not space.contains(b"bytes")
