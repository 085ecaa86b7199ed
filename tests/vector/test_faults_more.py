"""Red-team round 4, env faults: nothing an env does ends a run silently or stalls it, and nothing
it does to its action changes what is trained."""

import threading

import faulty_env
import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode
from test_faults import ROLLOUTS, agent_for, collect, vector

from lmgym import core
from lmgym.core import EnvError
from lmgym.vector import ConcurrentVectorEnv, Guarded

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("rollout", ROLLOUTS)
@pytest.mark.parametrize(
    "fault, name", [("exit", "SystemExit: 0"), ("interrupt", "KeyboardInterrupt"), ("generator_exit", "GeneratorExit")]
)
def test_an_env_raising_what_stops_a_process_is_named_as_an_env_error(rollout, fault, name):
    """SystemExit(0) from a step ended `lmgym train` with exit status 0, silently."""
    with pytest.raises(EnvError, match=f"seed 1.*step raised RuntimeError: raised {name}"):
        collect(rollout, fault)


@pytest.mark.parametrize("rollout", ROLLOUTS)
def test_an_env_that_writes_into_its_action_does_not_change_the_recorded_tokens(rollout):
    batch = collect(rollout, "mutate", seeds=None)
    agent = agent_for()
    for e in batch:
        assert 0 not in e.tokens[e.action_mask].tolist()  # the env zeroed its copy, not the sampled ids
    assert len(batch) == 8 and agent.tokenizer.decode(batch[0].tokens.tolist())


def test_a_fresh_env_whose_factory_hangs_is_an_error_not_a_stall():
    after = faulty_env.MADE[0] + 4  # the 4 envs of the vector env are made, a fifth hangs
    make = lambda: gym.make("faulty/Faulty-v0", fault="hang", make_hang_after=after)  # noqa: E731
    envs = ConcurrentVectorEnv([make] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    agent = agent_for(rollout={"step_timeout": 0.5})
    with pytest.raises(EnvError, match="making a fresh env did not return within 0.5 s"):  # not the test's timeout
        agent.collect(envs, 4, seeds=[0, 1, 2, 3])


def test_a_close_that_hangs_returns(monkeypatch):
    monkeypatch.setattr("lmgym.vector.concurrent.CLOSE_TIMEOUT", 0.3)
    envs = vector("concurrent", "close_hang", seeds=())
    envs.reset(seed=0)
    envs.close()  # returns (a hang here is the test's timeout)
    assert envs.closed  # and the env counts itself closed, the hung close left to its thread


def test_abandoned_threads_do_not_pile_up_without_bound(monkeypatch):
    """300 timeouts left 600 threads; under a pids limit the run died blaming the env."""
    monkeypatch.setattr(core, "MAX_STUCK_THREADS", 6)
    monkeypatch.setattr(core, "STUCK", [])
    make = lambda: gym.make("faulty/Faulty-v0", fault="hang", seeds=None)  # noqa: E731
    envs = ConcurrentVectorEnv([make] * 2, autoreset_mode=AutoresetMode.SAME_STEP, step_timeout=0.2)
    agent = agent_for()
    with pytest.raises(EnvError, match="more than 6.*the env hangs again and again"):
        for _ in range(10):
            agent.collect(envs, 2)
    assert len([t for t in core.STUCK if t.is_alive()]) <= 7


def test_the_default_model_plays_its_demonstrations_guarded_and_few_without_a_warm_start(tmp_path, monkeypatch):
    """The default model's warm start played an env whose reset hangs for ever, and 4,000
    demonstrations even with --warmstart-steps 0."""
    from lmgym.agents.warmstart import WarmStartConfig, default_model

    monkeypatch.setenv("LMGYM_CACHE", str(tmp_path))
    played = []
    monkeypatch.setattr("lmgym.agents.warmstart.supervised_finetune", lambda *a, **k: [0.0])
    real = __import__("lmgym.agents.warmstart", fromlist=["demonstrations"]).demonstrations

    def counting(env, n, *args, **kwargs):
        played.append(n)
        assert isinstance(env, Guarded)
        return real(env, n, *args, **kwargs)

    monkeypatch.setattr("lmgym.agents.warmstart.demonstrations", counting)
    default_model("lmgym/Echo-v0", config=WarmStartConfig(steps=0, n_layer=1, n_embd=16), use_cache=False)
    assert played == [32]
    faulty_env.HUNG_ONCE.clear()
    kwargs = {"fault": "reset_hang", "seeds": None}
    with pytest.raises(EnvError, match="reset did not return within 0.3 s, twice"):
        default_model("faulty/Faulty-v0", kwargs, WarmStartConfig(steps=0, n_layer=1), False, step_timeout=0.3)


def test_a_demonstration_longer_than_the_turn_budget_is_left_out(capsys):
    """An oracle turn the env's max_action_tokens cannot hold ended the warm start with a
    ValueError (ScienceWorld's 141-character commands); now that episode is left out."""
    from lmgym.agents.warmstart import demonstrations

    env = gym.make("lmgym/Calculator-v0", max_action_tokens=20)  # "<answer>N</answer>" + EOS: N of 1-2 digits
    kept = demonstrations(env, 20, env.unwrapped.tokenizer, tool_rate=0.0)
    left_out = int(capsys.readouterr().out.split("warm start: ")[1].split()[0])
    assert 0 < len(kept) < 20 and len(kept) + left_out == 20
    assert all(sum(e.action_mask.tolist()) <= 20 for e in kept)


def test_a_worker_thread_raising_keyboard_interrupt_does_not_interrupt_the_caller():
    worker = core.Worker()

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(RuntimeError, match="raised KeyboardInterrupt"):
        worker.call(interrupt, timeout=5)
    assert threading.main_thread().is_alive()
