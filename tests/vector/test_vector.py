"""ConcurrentVectorEnv: the sub-envs' steps at the same time, with exactly SyncVectorEnv's results."""

import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import oracle_trace, registered_ids

import lmgym  # noqa: F401
from lmgym.envs.echo import EchoEnv
from lmgym.vector import ConcurrentVectorEnv
from lmgym.wrappers import ToolUse

pytestmark = pytest.mark.timeout(900)


def rollout(vec_class, env_id, mode, steps=6, **kwargs):
    envs = vec_class([lambda: gym.make(env_id, **kwargs)] * 4, autoreset_mode=mode)
    trace = oracle_trace(envs, steps)
    envs.close()
    return trace


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
@pytest.mark.parametrize(
    "env_id",
    ["lmgym/PythonTool-v0", "lmgym/Calculator-v0", *[i for i in registered_ids() if "Arena" in i or "GEM" in i]],
)
def test_the_same_results_as_sync_vector_env(env_id, mode):
    assert rollout(ConcurrentVectorEnv, env_id, mode) == rollout(SyncVectorEnv, env_id, mode)


def test_tool_calls_run_at_the_same_time():
    together = threading.Barrier(8, timeout=60)  # passed only when all 8 calls are in at once

    def slow(text):
        together.wait()
        return text.upper()

    make = lambda: ToolUse(EchoEnv(max_action_tokens=32), {"slow": slow})  # noqa: E731
    envs = ConcurrentVectorEnv([make] * 8)
    envs.reset(seed=0)
    tokenizer = envs.get_attr("tokenizer")[0]
    obs, *_ = envs.step(tuple(np.array(tokenizer.encode(f"<slow>x{i}</slow>")) for i in range(8)))
    assert list(obs) == [f"<result>X{i}</result>" for i in range(8)]
    envs.close()
