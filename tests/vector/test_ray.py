"""Scale-out on Ray (``pip install 'lmgym[ray]'``): env actors spread over a simulated cluster,
results equal to ``SyncVectorEnv``'s, an actor or a machine lost mid-episode."""

import functools
import importlib.util
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import oracle_trace

import lmgym  # noqa: F401
from lmgym.core import EnvError

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray: pip install 'lmgym[ray]'"),
    pytest.mark.timeout(1800),
]
SMALL_STORE = 80 * 2**20  # bytes: Ray's object store, kept small on a small machine


@pytest.fixture(scope="module")
def ray_local():
    import ray

    tests = os.path.dirname(os.path.dirname(__file__))  # faulty_env, for the actors too
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=SMALL_STORE,
        log_to_driver=False,
        runtime_env=runtime_env,
    )
    yield ray
    ray.shutdown()


make_calculator = functools.partial(gym.make, "lmgym/Calculator-v0")  # pickled to the actors by reference


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_the_same_results_as_sync_vector_env(ray_local, mode):
    from lmgym.vector import RayVectorEnv

    ray_envs = RayVectorEnv([make_calculator] * 4, envs_per_actor=2, num_cpus=0.25, autoreset_mode=mode)
    assert len(ray_envs.groups) == 2
    assert oracle_trace(ray_envs) == oracle_trace(SyncVectorEnv([make_calculator] * 4, autoreset_mode=mode))
    ray_envs.close()


def test_gym_make_vec_steps_tool_envs_concurrently_and_on_ray_when_asked(ray_local):
    from lmgym.vector import ConcurrentVectorEnv, RayVectorEnv

    assert isinstance(gym.make_vec("lmgym/PythonTool-v0", num_envs=2), ConcurrentVectorEnv)
    envs = gym.make_vec("lmgym/Calculator-v0", num_envs=4, backend="ray", num_cpus=0.25, envs_per_actor=4)
    assert isinstance(envs, RayVectorEnv) and envs.spec.id == "lmgym/Calculator-v0"
    local = gym.make_vec("lmgym/Calculator-v0", 4)
    assert list(envs.reset(seed=[1, 2, 3, 4])[0]) == list(local.reset(seed=[1, 2, 3, 4])[0])
    envs.close()


def test_a_killed_actor_is_started_again_and_its_episodes_go_on(ray_local):
    from lmgym.vector import RayVectorEnv

    mode = AutoresetMode.SAME_STEP
    envs = RayVectorEnv([make_calculator] * 4, envs_per_actor=2, num_cpus=0.25, autoreset_mode=mode)
    expected = oracle_trace(SyncVectorEnv([make_calculator] * 4, autoreset_mode=mode), steps=2)
    tokenizer = envs.get_attr("tokenizer")[0]
    obs, _ = envs.reset(seed=[10, 11, 12, 13])
    oracles = envs.call("get_wrapper_attr", "oracle")
    first = tuple(np.array(tokenizer.encode(o())[:128], dtype=np.int64) for o in oracles)
    envs.step(first)  # a calculator call: every episode is mid-way
    os.kill(ray_local.get(envs.groups[0].actor.pid.remote()), signal.SIGKILL)
    oracles = envs.call("get_wrapper_attr", "oracle")  # the first call to the dead actor replays
    second = tuple(np.array(tokenizer.encode(o())[:128], dtype=np.int64) for o in oracles)
    obs, rewards, terminated, truncated, infos = envs.step(second)
    assert (list(obs), rewards.tolist()) == (expected[2][0], expected[2][1])  # no episode lost or played twice
    assert envs.restarts == 1 and envs.groups[1].restarts == 0
    envs.close()


def test_an_actor_that_keeps_dying_is_named(ray_local):
    from lmgym.vector import RayVectorEnv

    envs = RayVectorEnv([make_calculator] * 2, num_cpus=0.25, max_restarts=1)
    envs.reset(seed=[5, 6])
    for _ in range(2):
        os.kill(ray_local.get(envs.groups[1].actor.pid.remote()), signal.SIGKILL)
        try:
            envs.step(tuple(np.array([48], dtype=np.int64) for _ in range(2)))
        except EnvError as e:
            assert "sub-env 1 (lmgym/Calculator-v0, seed 6)" in str(e) and "max_restarts=1" in str(e)
            break
    else:
        pytest.fail("the second death was not reported")
    envs.close()


def test_the_defaults_start_on_two_cpus_as_sync_vector_env_is_called(ray_local):
    """num_cpus=1 for each one-env actor could not start 4 envs on 2 CPUs (120 s, then an error);
    Ray's default holds a CPU only to place an actor. A second vector env (the evaluation's) fits too."""
    from lmgym.vector import RayVectorEnv

    mode = AutoresetMode.SAME_STEP
    train, evaluation = RayVectorEnv([make_calculator] * 4, autoreset_mode=mode), RayVectorEnv([make_calculator] * 4)
    assert len(train.groups) == 4 and len(evaluation.groups) == 4
    assert oracle_trace(train) == oracle_trace(SyncVectorEnv([make_calculator] * 4, autoreset_mode=mode))
    assert evaluation.single_observation_space == gym.make("lmgym/Calculator-v0").observation_space
    train.close(), evaluation.close()


def test_a_placement_that_can_never_fit_fails_at_once(ray_local):
    from lmgym.vector import RayVectorEnv

    for kwargs, need in [({"num_cpus": 64}, "need 192 CPUs"), ({"num_cpus": 1, "envs_per_actor": 1}, "need 3 CPUs")]:
        with pytest.raises(ValueError, match=f"{need} at once.*the cluster has 2"):
            RayVectorEnv([make_calculator] * 3, **kwargs)
    # refused before any actor started: no START_TIMEOUT (120 s) was waited, within the module's timeout


def test_an_actor_that_cannot_make_its_env_says_why(ray_local):
    from lmgym.vector import RayVectorEnv

    with pytest.raises(RuntimeError, match="could not make its envs: .*Namespace nowhere not found"):
        RayVectorEnv([functools.partial(gym.make, "nowhere/Nothing-v0")])


def test_a_step_that_hangs_in_an_actor_does_not_stall_the_next(ray_local):
    """Each stuck step held one of the actor's threads; the second one stalled the run."""
    from helpers import tiny_model

    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.tokenizers import ByteTokenizer
    from lmgym.vector import RayVectorEnv

    make = functools.partial(gym.make, "faulty_env:faulty/Faulty-v0", fault="hang", seeds=(1, 5))
    envs = RayVectorEnv([make] * 2, autoreset_mode=AutoresetMode.SAME_STEP, step_timeout=2)
    agent = PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=32), tokenizer=ByteTokenizer(), config=PPOConfig())
    for seeds in ([0, 1], [4, 5], [2, 3]):  # the second one stalled for good
        batch = agent.collect(envs, 2, seeds=seeds)
        assert [e.truncated for e in batch] == [False, seeds[1] in (1, 5)]
    envs.close()


# ------------------------------------------------------------------------------ rollout engines
@pytest.fixture(scope="module")
def engine_agents(ray_local):
    """The same tiny model in an agent with its engine here and in one with two engine actors."""
    import copy

    from helpers import tiny_model

    from lmgym.agents import PPOAgent, PPOConfig
    from lmgym.tokenizers import ByteTokenizer

    model = tiny_model(258, 256, seed=3, n_layer=2, n_embd=32, n_positions=256)
    local = PPOAgent(copy.deepcopy(model), tokenizer=ByteTokenizer(), config=PPOConfig(seed=0))
    config = PPOConfig(seed=0, engine={"engines": 2, "kwargs": {"num_cpus": 0.5}})
    remote = PPOAgent(copy.deepcopy(model), tokenizer=ByteTokenizer(), config=config)
    yield local, remote
    remote.close()


def test_two_engine_actors_give_the_episodes_one_local_engine_gives(engine_agents):
    import torch

    local, remote = engine_agents
    envs = gym.make_vec("lmgym/Pipeline-v0", num_envs=4, transforms=[lambda out: " and again: "], max_action_tokens=8)
    batches = []
    for agent in (local, remote):
        torch.manual_seed(11)  # the same per-episode keys
        batches.append(agent.collect(envs, 8, seeds=list(range(8))))
    for a, b in zip(*batches):
        assert torch.equal(a.tokens, b.tokens) and a.turn_ends == b.turn_ends
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)  # the trainer's own log-probs
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=0)


def test_weights_reach_the_engine_actors_through_files(engine_agents):
    import torch

    _, remote = engine_agents
    with torch.no_grad():
        for p in remote.model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        remote.value_head.bias.fill_(0.5)
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=4)
    stale = remote.collect(envs, 4)
    remote.engine.sync_weights()
    fresh = remote.collect(envs, 4)
    for batch, close in ((stale, False), (fresh, True)):
        scored = [e for e in batch]
        for e in scored:
            with torch.no_grad():
                logits = remote.model(e.tokens[None]).logits[0, :-1].double()
            logp = torch.log_softmax(logits, -1).gather(-1, e.tokens[1:, None]).squeeze(-1)
            mask = e.action_mask[1:]
            gap = (e.logprobs[1:][mask].double() - logp[mask]).abs().max().item()
            assert (gap < 1e-4) == close, gap
    assert all(abs(v - 0.5) < 0.5 for e in fresh for v in e.values[e.action_mask].tolist())


# ------------------------------------------------------ a simulated cluster (last: it ends ray_local)
def test_actors_spread_over_nodes_and_a_lost_node_s_episodes_go_on(ray_local):
    from ray.cluster_utils import Cluster

    from lmgym.vector import RayVectorEnv

    ray = ray_local
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": SMALL_STORE, "include_dashboard": False},
    )
    workers = [cluster.add_node(num_cpus=1, object_store_memory=SMALL_STORE) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        mode = AutoresetMode.SAME_STEP
        envs = RayVectorEnv([make_calculator] * 3, num_cpus=0.5, autoreset_mode=mode)
        placed = [ray.get(group.actor.node.remote()) for group in envs.groups]
        assert len(set(placed)) == 3  # one actor on each of the three machines
        expected = oracle_trace(SyncVectorEnv([make_calculator] * 3, autoreset_mode=mode), steps=2)
        tokenizer = envs.get_attr("tokenizer")[0]
        envs.reset(seed=[10, 11, 12])
        actions = tuple(np.array(tokenizer.encode(o())[:128]) for o in envs.call("get_wrapper_attr", "oracle"))
        envs.step(actions)  # every episode mid-way (a calculator call)
        lost = next(w for w in workers if w.node_id in placed)
        cluster.remove_node(lost, allow_graceful=False)  # a machine gone, its actor with it
        deadline = time.monotonic() + 120
        while any(n["NodeID"] == lost.node_id and n["Alive"] for n in ray.nodes()) and time.monotonic() < deadline:
            time.sleep(0.5)  # until Ray's control plane has seen it go
        actions = tuple(np.array(tokenizer.encode(o())[:128]) for o in envs.call("get_wrapper_attr", "oracle"))
        obs, rewards, *_ = envs.step(actions)
        assert (list(obs), rewards.tolist()) == (expected[2][0], expected[2][1])
        assert 1 <= envs.restarts <= 3
        assert lost.node_id not in {ray.get(group.actor.node.remote()) for group in envs.groups}
        envs.close()
    finally:
        ray.shutdown()
        cluster.shutdown()


# ------------------------------------------------------------------- lmgym train --ray (its own Ray)
def lmgym_cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=1500)


def test_train_on_ray_with_its_defaults_on_two_cpus(tmp_path):
    """The README's command built its evaluation envs in 2 more actors that could never be placed."""
    out = tmp_path / "run"
    result = lmgym_cli(
        "train", "lmgym/Calculator-v0", "--ray", "--env-workers", "2", "--episodes", "16", "--warmstart-steps", "5",
        "--eval-episodes", "8", "--num-envs", "8", "--episodes-per-update", "8", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ray: 1 node(s)" in result.stdout and "success (greedy)" in result.stdout
    assert "WARNING" not in result.stderr and "Token authentication" not in result.stderr  # nothing to act on


def test_train_with_a_placement_that_can_never_fit_is_one_line(tmp_path):
    """Each actor fits a node, all of them together do not: one line once the cluster is known.
    (An ask past any node's CPUs is a usage error before Ray starts: tests/cli/test_found_early.py.)"""
    out, actors = tmp_path / "run", (os.cpu_count() or 1) + 1  # one CPU each: more than the machine has
    result = lmgym_cli(
        "train", "lmgym/Echo-v0", "--ray", "--env-workers", str(actors), "--env-worker-cpus", "1",
        "--warmstart-steps", "5", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("lmgym train: failed: ")]
    assert f"need {actors} CPUs at once" in line and f"traceback in {out / 'error.log'}" in line
