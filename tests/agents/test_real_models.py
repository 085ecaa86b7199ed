"""Bring your own model: tiny Llama, Qwen2 and Mistral models with BPE tokenizers trained here and
chat templates of their families, trained full and with LoRA on Countdown-v0 through ChatTemplate,
token-exact across turns, saved and evaluated in a fresh process; and the bad inputs, one line each.
Offline: everything is built in the test."""

import importlib.util
import json
import subprocess
import sys

import gymnasium as gym
import pytest
import torch
from helpers import FAMILIES
from helpers import build_chat_model as build

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.wrappers import ChatTemplate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
peft = pytest.importorskip("peft")


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    return request.param, build(request.param, tmp_path_factory.mktemp(request.param))


def lmgym_cli(*args):
    return subprocess.run([sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=1500)


def agent_for(path, **config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = PPOConfig(seed=0, episodes_per_update=4, mini_batch_size=4, learning_rate=1e-3, **config)
    return PPOAgent(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), config=cfg)


def countdown(agent, n=4):
    return gym.make_vec("lmgym/Countdown-v0", num_envs=n, tokenizer=agent.tokenizer, wrappers=[ChatTemplate])


def test_full_training_two_updates(family):
    _, path = family
    agent = agent_for(path)
    before = [p.detach().clone() for p in agent.model.parameters()]
    agent.learn(countdown(agent), total_episodes=8, progress_bar=False)
    assert agent.num_updates == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters()))


def test_lora_training_trains_adapters_only(family):
    _, path = family
    agent = agent_for(path, model={"peft_config": {"r": 4}})
    assert agent.ref_model is None  # the reference is the base with adapters off
    base = {n: p.detach().clone() for n, p in agent.model.named_parameters() if "lora_" not in n}
    agent.learn(countdown(agent), total_episodes=8, progress_bar=False)
    assert agent.num_updates == 2
    assert all(torch.equal(base[n], p) for n, p in agent.model.named_parameters() if n in base)
    trained = [n for n, p in agent.policy.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n or "value_head" in n for n in trained)


def test_token_exact_across_three_turns(family):
    """decode(the episode's token stream) is the conversation the tokenizer's own template renders,
    with the model's turns exactly as sampled; the trained ids are the sampled ids."""
    name, path = family
    agent = agent_for(path, rollout={"max_new_tokens": 12})
    hf = agent.tokenizer.hf
    notes = [lambda out: "Try once more.", lambda out: f"You wrote {len(out)} characters. Last try."]
    env = ChatTemplate(
        gym.make("lmgym/Pipeline-v0", prompts=["Name a number."], transforms=notes, tokenizer=agent.tokenizer)
    )
    end_of_turn = env.end_of_turn
    batch = agent.collect(env, num_episodes=3, seeds=[0, 1, 2])
    for e in batch:
        assert len(e.turn_ends) == 3
        starts = [t for t in range(1, e.length) if e.action_mask[t] and not e.action_mask[t - 1]]
        actions = [e.tokens[s : end + 1].tolist() for s, end in zip(starts, e.turn_ends)]
        messages = [{"role": "user", "content": "Name a number."}]
        for i, action in enumerate(actions):  # as sampled: a special token mid-turn is in the content too
            sampled = hf.decode(action, skip_special_tokens=False).removesuffix(end_of_turn)
            messages.append({"role": "assistant", "content": sampled})
            if i < len(notes):  # the env's note, on the text it decoded (special tokens dropped)
                messages.append({"role": "user", "content": notes[i](hf.decode(action, skip_special_tokens=True))})
        rendered = hf.apply_chat_template(messages, tokenize=False)
        stream = hf.decode(e.tokens.tolist(), skip_special_tokens=False)
        assert rendered.startswith(stream), name
        assert rendered[len(stream) :].strip() in ("", end_of_turn)  # the last turn's closing, if not sampled
        assert sum(len(a) for a in actions) == int(e.action_mask.sum())  # every sampled id is trained, nothing else


ADAPTER_GAMES = [  # (id, kwargs, library, a move the env answers and goes on after)
    ("lmgym/GEM-v0", {"env_id": "game:GuessTheNumber-v0-easy"}, "gem", "I guess \\boxed{6}"),
    ("lmgym/TextArena-v0", {"game": "GuessTheNumber-v0"}, "textarena", "My guess: [7]"),
    (
        "lmgym/ReasoningGym-v0",
        {"task": "basic_arithmetic", "max_attempts": 2},
        "reasoning_gym",
        "Let me think about this sum for a while before I answer it.",
    ),
]


class Scripted:
    """An engine that plays the same turn in every context (the agent's engine for the rest)."""

    def __init__(self, engine, turn):
        self.engine, self.turn = engine, turn

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, contexts, *args, **kwargs):
        return [list(self.turn) for _ in contexts]


@pytest.mark.parametrize("env_id,kwargs,library,move", ADAPTER_GAMES)
def test_task_library_envs_are_token_exact_in_a_chat_template(tmp_path, env_id, kwargs, library, move):
    """A task library's env (its rules, the answer format, the game's replies) in a BPE chat
    model's own template, with a system message: the episode's token stream is the conversation
    the template renders from the env's text and the turns as sampled, over several turns."""
    pytest.importorskip(library)
    path = build("qwen2", tmp_path / "m", max_positions=4096)  # a game's rules are ~700 of its tokens
    agent = agent_for(path, rollout={"max_new_tokens": 12})
    hf, system = agent.tokenizer.hf, "Play well. Answer briefly."

    def make():
        return ChatTemplate(gym.make(env_id, tokenizer=agent.tokenizer, max_episode_steps=3, **kwargs), system=system)

    env = make()
    played = agent.tokenizer.encode(move) + agent.tokenizer.encode(env.end_of_turn)  # a model that plays on
    agent.engine = Scripted(agent.engine, played)
    batch = agent.collect(env, num_episodes=2, seeds=[0, 1])
    assert min(len(e.turn_ends) for e in batch) >= 2  # several turns: the game's replies are in the stream
    for e in batch:
        replay = make()  # the same seed and the sampled actions give the env's text back
        prompt, _ = replay.unwrapped.reset(seed=e.seed)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        starts = [t for t in range(1, e.length) if e.action_mask[t] and not e.action_mask[t - 1]]
        for start, end in zip(starts, e.turn_ends):
            action = e.tokens[start : end + 1].tolist()
            messages.append({"role": "assistant", "content": hf.decode(action).removesuffix(env.end_of_turn)})
            obs, _, terminated, _, _ = replay.unwrapped.step(action)
            if not terminated:  # the env's reply; after a truncated episode's last turn too
                messages.append({"role": "user", "content": obs})
        rendered = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=e.truncated)
        stream = hf.decode(e.tokens.tolist())
        assert rendered.startswith(stream) and rendered[len(stream) :].strip() in ("", env.end_of_turn)


def test_lora_cli_train_then_eval_in_a_fresh_process(family, tmp_path):
    name, path = family
    out = tmp_path / "run"
    small = ["--episodes", "4", "--num-envs", "4", "--episodes-per-update", "4", "--eval-episodes", "2"]
    small += ["--env-arg", "max_action_tokens=16"]
    result = lmgym_cli(
        "train", "lmgym/Countdown-v0", "--model", str(path), "--chat-template", "--lora", "r=4", *small,
        "--eval-every", "0", "--warmstart-steps", "0", "--allow-no-signal", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "reference model none (LoRA" in result.stdout
    manifest = json.loads((out / "model" / "lmgym_model.json").read_text())
    assert manifest["adapters"] and manifest["base"] == str(path) and manifest["chat_template"]
    assert (out / "model" / "adapter_config.json").is_file() and not (out / "model" / "ref_model").exists()
    result = lmgym_cli("eval", "lmgym/Countdown-v0", "--model", str(out / "model"), "--episodes", "4", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["episodes"] == 4
    loaded = PPOAgent.load(out / "model")  # base + adapters, the base found through the manifest
    assert loaded.is_peft and loaded.ref_model is None
    if name == "llama":  # export: merged weights give the same logits as base + adapters
        merged = tmp_path / "merged"
        result = lmgym_cli("export", str(out / "model"), "--merged", str(merged))
        assert result.returncode == 0, result.stderr[-3000:]
        from transformers import AutoModelForCausalLM

        ids = torch.tensor([loaded.tokenizer.encode("Use 3 5 7 to reach 15")])
        plain = AutoModelForCausalLM.from_pretrained(merged)
        with torch.no_grad():
            torch.testing.assert_close(plain(ids).logits, loaded.model(input_ids=ids).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="needs lmgym[reasoning-gym]")
def test_train_with_a_tool_on_a_task_library_env_and_eval_applies_it(tmp_path):
    """``--tools calc`` on a reasoning-gym task, the pretrained recipe (warm start included, its
    budget from the task), and ``lmgym eval`` of the saved model with the same tools and budget."""
    path = build("qwen2", tmp_path / "m")
    out = tmp_path / "run"
    task = ["lmgym/ReasoningGym-v0", "--env-arg", "task=basic_arithmetic", "--model", str(path), "--chat-template"]
    small = ["--episodes", "4", "--num-envs", "4", "--episodes-per-update", "4", "--eval-episodes", "2"]
    result = lmgym_cli("train", *task, "--tools", "calc", *small, "--eval-every", "0", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("recipe for a pretrained model: ")]
    assert "LoRA r=16" in line and "warm start 30 steps on the oracle" in line and "max_action_tokens" in line
    budget = int(line.split("max_action_tokens ")[1].split(",")[0])
    assert "max_episode_steps 4" in line  # the oracle's two turns, twice: fewer than the env's 16
    result = lmgym_cli("eval", "lmgym/ReasoningGym-v0", "--model", str(out / "model"), "--episodes", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    args = f"{{'task': 'basic_arithmetic', 'max_action_tokens': {budget}, 'max_episode_steps': 4}}"
    assert f"with tools calc and its chat template, {args}" in result.stdout


def one_line_error(result, expected):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and expected in lines[0], result.stderr[-2000:]


def test_bad_inputs_are_one_line(tmp_path):
    path = build("qwen2", tmp_path / "qwen2")
    common = ["lmgym/Countdown-v0", "--episodes", "4", "--num-envs", "4", "--out", str(tmp_path / "run")]
    # a LoRA target the model does not have: the modules it has are named
    result = lmgym_cli("train", *common, "--model", str(path), "--lora", "r=4,targets=c_attn")
    one_line_error(result, "LoRA target module 'c_attn' is not in the model; its linear modules are: ")
    assert "q_proj" in result.stderr
    # a chat template missing
    from transformers import AutoTokenizer

    plain = tmp_path / "plain"
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = None
    tok.save_pretrained(plain)
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(path).save_pretrained(plain)
    one_line_error(lmgym_cli("train", *common, "--model", str(plain), "--chat-template"), "has no chat template")
    # a model whose vocabulary does not cover the tokenizer's ids
    small = tmp_path / "small"
    model = AutoModelForCausalLM.from_pretrained(path)
    model.resize_token_embeddings(len(tok) - 10)
    model.save_pretrained(small)
    tok.save_pretrained(small)
    one_line_error(lmgym_cli("train", *common, "--model", str(small)), "token embeddings but the tokenizer has")


def test_env_tags_stay_text_unless_asked(tmp_path):
    path = build("qwen2", tmp_path / "q")
    env = gym.make("lmgym/Countdown-v0", tokenizer=str(path))
    tok = env.get_wrapper_attr("tokenizer")
    assert len(tok.encode("<answer>")) > 1  # plain text by default, as for a real model
    from lmgym.agents.warmstart import load_for_env

    _, added = load_for_env(path, "lmgym/Countdown-v0", add_special_tokens=True)
    assert len(added.encode("<answer>")) == 1 and isinstance(lmgym.as_tokenizer(added), type(added))


def test_any_model_warm_starts_from_the_cli_and_remembers_its_env_args(family, tmp_path):
    name, path = family
    if name != "llama":
        pytest.skip("one family covers the CLI path")
    out = tmp_path / "run"
    small = ["--episodes", "4", "--num-envs", "4", "--episodes-per-update", "4", "--eval-episodes", "4"]
    result = lmgym_cli(
        "train", "lmgym/Countdown-v0", "--model", str(path), "--chat-template", "--warmstart-steps", "3",
        "--env-arg", "max_action_tokens=40", *small, "--eval-every", "0", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"warm start of {path}: 3 supervised steps" in result.stdout
    assert (out / "warmstart" / "config.json").is_file()
    manifest = json.loads((out / "model" / "lmgym_model.json").read_text())
    assert manifest["env_kwargs"] == {"max_action_tokens": 40}
