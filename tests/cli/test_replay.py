"""A run is a function of its config, its seed and the machine: on CPU, ``lmgym train --replay RUN``
runs it again and finds the same episodes, the same metrics (timing columns aside) and the same
weights, for the default model with its warm start (one thread and two), a tiny chat model
with LoRA and the pure-RL recipe, and a multi-turn env with a tool; a replay that differs names
the first update that does. Vector envs of every kind give the same weights (API level)."""

import csv
import hashlib
import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from helpers import build_chat_model, tiny_model

import lmgym  # noqa: F401 (registers the envs)
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.tokenizers import ByteTokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BASE = ["--allow-no-signal", "--num-envs", "8", "--eval-episodes", "8", "--eval-every", "1"]
BASE += ["--episodes-per-update", "8", "--episodes", "16", "--seed", "3"]


def lmgym_train(cache, *args):
    env = {**os.environ, "LMGYM_CACHE": str(cache)}
    command = [sys.executable, "-m", "lmgym.cli", "train", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=1000)


def metrics(out):
    with open(out / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def weights(out):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "model").iterdir())
        if p.suffix in (".safetensors", ".pt", ".bin")
    }


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    pytest.importorskip("peft")
    return build_chat_model("qwen2", tmp_path_factory.mktemp("qwen2"))


SETTINGS = {
    "one-thread": ["lmgym/Echo-v0", "--warmstart-steps", "5", "--threads", "1"],
    "two-threads": ["lmgym/Echo-v0", "--warmstart-steps", "5", "--threads", "2"],
    "multi-turn-tool": ["lmgym/Calculator-v0", "--warmstart-steps", "5", "--tools", "calc"],
    "chat-lora-pure-rl": ["lmgym/Countdown-v0", "--chat-template", "--lora", "r=4", "--warmstart-steps", "0"],
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_replay_is_identical(tmp_path, setting, request):
    args = list(SETTINGS[setting])
    if setting == "chat-lora-pure-rl":
        args += ["--model", str(request.getfixturevalue("chat_model")), "--env-arg", "max_action_tokens=16"]
    cache, a = tmp_path / "cache", tmp_path / "a"
    first = lmgym_train(cache, *args, *BASE, "--out", str(a))
    assert first.returncode == 0, first.stderr[-2000:]
    again = lmgym_train(cache, "--replay", str(a))
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip().splitlines()[-1].startswith("replay: identical")
    b = tmp_path / "a-replay"
    assert metrics(a) == metrics(b) and len(metrics(a)) >= 3
    assert (a / "episodes.jsonl").read_text() == (b / "episodes.jsonl").read_text()
    assert weights(a) == weights(b) and weights(a)
    provenance = json.loads((a / "summary.json").read_text())["provenance"]
    assert provenance["bit_exact"] and provenance["spec"]["seed"] == 3 and provenance["spec"]["episodes"] == 16


def test_a_replay_that_differs_names_the_first_update(tmp_path):
    cache, a = tmp_path / "cache", tmp_path / "a"
    assert lmgym_train(cache, "lmgym/Echo-v0", "--warmstart-steps", "5", *BASE, "--out", str(a)).returncode == 0
    summary = json.loads((a / "summary.json").read_text())
    summary["provenance"]["spec"]["settings"].append([["learning_rate"], 0.01])  # as if the run had used another
    (a / "summary.json").write_text(json.dumps(summary))
    again = lmgym_train(cache, "--replay", str(a), "--out", str(tmp_path / "b"))
    assert again.returncode == 1
    last = again.stderr.strip().splitlines()[-1]
    assert last.startswith("lmgym train: replay differs: first at update 1: "), last


def test_replay_of_a_directory_without_a_run_is_a_usage_error(tmp_path):
    done = lmgym_train(tmp_path / "cache", "--replay", str(tmp_path))
    assert done.returncode == 2 and "summary.json" in done.stderr


def byte_agent():
    model = tiny_model(258, 256, seed=0, n_layer=1, n_embd=32)
    config = PPOConfig(seed=0, episodes_per_update=4, mini_batch_size=2, learning_rate=1e-3)
    return PPOAgent(model, tokenizer=ByteTokenizer(), config=config)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sync_and_async_vector_envs_train_the_same_weights(mode):
    def trained(vectorization_mode):
        agent = byte_agent()
        envs = gym.make_vec("lmgym/Echo-v0", num_envs=4, vectorization_mode=vectorization_mode)
        agent.learn(envs, total_episodes=12, progress_bar=False)
        envs.close()
        return [p.detach().clone() for p in agent.model.parameters()]

    reference, other = trained("sync"), trained(mode)
    assert all(torch.equal(x, y) for x, y in zip(reference, other))
