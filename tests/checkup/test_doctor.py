"""``lmgym doctor``: each check proven by the failure it exists for, FAIL on the broken thing and
PASS on the correct one; the command and ``lmgym train --doctor``."""

import json
import os
import subprocess
import sys

import faulty_env  # noqa: F401 (registers faulty/Never-v0 and faulty/BudgetAsEnd-v0)
import gymnasium as gym
import pytest
import torch
from helpers import build_chat_model, tiny_model

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.engines import Generation
from lmgym.checkup import doctor
from lmgym.checkup.checks import env_contract, loss_mask, truncation
from lmgym.core import LMEnv
from lmgym.tokenizers import ByteTokenizer
from lmgym.wrappers import ChatTemplate

pytestmark = pytest.mark.timeout(1800)


def agent_for(**config):
    return PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=32), tokenizer=ByteTokenizer(), config=PPOConfig(**config))


def status(report, name):
    (check,) = [c for c in report.checks if c.name == name]
    return check.status, check.figure


def test_every_check_passes_on_a_sound_run_and_the_report_reads():
    agent = agent_for()
    report = lmgym.doctor(agent, gym.make_vec("lmgym/Calculator-v0", num_envs=4), groups=2, greedy_episodes=4)
    names = [c.name for c in report.checks]
    assert names == ["loss mask", "token identity", "log-probs", "truncation", "signal", "env contract", "cost"]
    for name in ("loss mask", "token identity", "log-probs", "env contract", "cost"):
        assert status(report, name)[0] == "PASS", status(report, name)
    data = json.loads(report.to_json())
    assert data["ok"] == report.ok and len(data["checks"]) == 7
    assert str(report).splitlines()[0].startswith("PASS  loss mask")


class LeakyAgent(PPOAgent):
    """A collector bug of the kind that collapsed a run (unsloth #5673): env tokens marked trained."""

    def collect(self, *args, **kwargs):
        batch = super().collect(*args, **kwargs)
        for e in batch:
            e.action_mask[1:] = True
        return batch


def test_the_loss_mask_check_fails_on_env_tokens_in_the_loss():
    leaky = LeakyAgent(tiny_model(258, 256, n_layer=1, n_embd=32), tokenizer=ByteTokenizer())
    report = doctor(leaky, gym.make_vec("lmgym/Calculator-v0", num_envs=4), groups=2, greedy_episodes=4)
    state, figure = status(report, "loss mask")
    assert state == "FAIL" and " 0 not sampled" not in figure
    assert not report.ok
    sound = agent_for()
    batch = sound.collect(gym.make_vec("lmgym/Echo-v0", num_envs=2), 2)
    calls = [(e.tokens[: e.turn_ends[0]].tolist()[: e.action_mask.nonzero()[0].item()], []) for e in batch]
    assert loss_mask(batch, calls, 256)[0].status == "FAIL"  # a turn the engine never sampled
    assert loss_mask(batch, calls, 256)[1] == 2  # and contexts that are no episode's stream


TRIMMING = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class Padded:
    """An engine that writes ``ok`` and trailing spaces, then ends its turn."""

    exact = False

    def __init__(self, tokenizer):
        self.turn = tokenizer.encode("ok   ") + tokenizer.encode("<|im_end|>")

    def generate(self, contexts, *args, **kwargs):
        return [list(self.turn) for _ in contexts]

    def sync_weights(self):
        pass

    def reset(self):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("template, expected", [(None, "PASS"), (TRIMMING, "FAIL")])
def test_token_identity_fails_on_a_template_that_renders_past_turns_otherwise(tmp_path, template, expected):
    path = build_chat_model("qwen2", tmp_path / "m", max_positions=2048)
    agent = PPOAgent(str(path), config=PPOConfig())
    if template:
        agent.tokenizer.hf.chat_template = template
    agent.engine = Padded(agent.tokenizer)

    def make():
        return ChatTemplate(gym.make("lmgym/Countdown-v0", tokenizer=agent.tokenizer))

    report = doctor(agent, gym.vector.SyncVectorEnv([make] * 4), make_env=make, groups=2, greedy_episodes=4)
    state, figure = status(report, "token identity")
    assert state == expected, figure
    if expected == "FAIL":
        assert "render differently at once than turn by turn" in figure


class HotEngine:
    """The agent's engine, its log-probs reported as if at another temperature (off by a factor)."""

    def __init__(self, engine, factor):
        self.engine, self.factor = engine, factor

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, *args, **kwargs):
        out = self.engine.generate(*args, **kwargs)
        return [Generation(g, [lp * self.factor for lp in g.logprobs], g.values) for g in out]


@pytest.mark.parametrize("factor, expected", [(1.0, "PASS"), (1.5, "FAIL")])
def test_the_logprob_check_fails_on_an_engine_off_by_a_temperature(factor, expected):
    agent = agent_for()
    agent.engine = HotEngine(agent.engine, factor)
    report = doctor(agent, gym.make_vec("lmgym/Echo-v0", num_envs=4), groups=2, greedy_episodes=4)
    assert status(report, "log-probs")[0] == expected, status(report, "log-probs")


@pytest.mark.parametrize("env_id, expected", [("faulty/Faulty-v0", "PASS"), ("faulty/BudgetAsEnd-v0", "FAIL")])
def test_the_truncation_check_fails_on_a_budget_ended_as_terminated(env_id, expected):
    kwargs = {"fault": "none"} if "Faulty" in env_id else {}
    check = truncation(lmgym.agents.Trajectories([]), lambda: gym.make(env_id, **kwargs), 256, 8)
    assert check.status == expected, check.figure
    if expected == "FAIL":
        assert "on its turn limit (3)" in check.figure


class Guessing(Padded):
    """An engine that writes one of four letters at random: some of a group's episodes echo right."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, contexts, *args, **kwargs):
        return [self.tokenizer.encode("abcd"[int(torch.randint(4, ()))]) for _ in contexts]


@pytest.mark.parametrize("env_id, expected", [("lmgym/Echo-v0", "PASS"), ("faulty/Never-v0", "FAIL")])
def test_the_signal_check_fails_on_an_env_that_never_rewards(env_id, expected):
    agent = agent_for()
    agent.engine = Guessing(agent.tokenizer)
    make = lambda: gym.make(env_id, alphabet_size=4, length=1)  # noqa: E731
    torch.manual_seed(0)
    report = doctor(agent, gym.vector.SyncVectorEnv([make] * 8), groups=4, group_size=4, greedy_episodes=4)
    assert status(report, "signal")[0] == expected, status(report, "signal")


class StopsEarly(LMEnv):
    """The oracle's answer holds the env's own stop string: the turn ends inside it."""

    stop_strings = ("1",)
    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say 12.\n", {}

    def step_text(self, text):
        return "", float(text == "12"), True, False, {"correct": text == "12"}

    def oracle(self):
        return "12"


class Unseeded(StopsEarly):
    """A prompt that ignores the seed (a global RNG)."""

    stop_strings = ("\n",)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return f"Say 12 (#{torch.randint(10**9, (1,)).item()}).\n", {}


@pytest.mark.parametrize("env, expected", [(StopsEarly, "stop strings"), (Unseeded, "reset(seed=11) twice")])
def test_the_env_contract_fails_on_stop_strings_or_seeding(env, expected):
    tok = ByteTokenizer()
    check = env_contract(lambda: env(tokenizer=tok), tok, env.stop_strings)
    assert check.status == "FAIL" and expected in check.figure + check.advice


def test_the_cost_check_fails_when_the_model_cannot_fit(monkeypatch):
    agent = agent_for()
    monkeypatch.setattr(agent, "memory_estimate", lambda: {**PPOAgent.memory_estimate(agent), "weights": 2.0**60})
    report = doctor(agent, gym.make_vec("lmgym/Echo-v0", num_envs=4), groups=2, greedy_episodes=4)
    assert status(report, "cost")[0] == "FAIL"


def test_a_number_guessing_env_keeps_its_info_types_in_a_vector_env():
    """GuessNumber-v0's info held a guess of None after text without a number: SyncVectorEnv then
    failed to put it in an int array (the doctor found it)."""
    envs = gym.make_vec("lmgym/GuessNumber-v0", num_envs=2, vectorization_mode="sync")
    tok = envs.get_attr("tokenizer")[0]
    envs.reset(seed=0)
    first = envs.step((tok.encode("50"), tok.encode("no idea")))[4]
    second = envs.step((tok.encode("no idea"), tok.encode("25")))[4]
    # an int array, the env without a guess masked out (no None in it)
    assert first["guess"].tolist()[0] == 50 and first["_guess"].tolist() == [True, False]
    assert second["guess"].tolist()[1] == 25 and second["_guess"].tolist() == [False, True]


def cli(*args):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=1500, env=env
    )


def test_the_command_prints_its_table_and_json_and_fails_on_a_fail(tmp_path):
    ok = cli("doctor", "lmgym/Echo-v0", "--json", "--groups", "2", "--num-envs", "4", "--warmstart-steps", "0")
    assert ok.returncode in (0, 1), ok.stderr[-2000:]
    report = json.loads(ok.stdout)  # stdout holds the JSON and nothing else
    assert [c["name"] for c in report["checks"]][:2] == ["loss mask", "token identity"]
    path = build_chat_model("qwen2", tmp_path / "m")
    never = cli(
        "doctor",
        "faulty_env:faulty/Never-v0",
        "--model",
        str(path),
        "--groups",
        "2",
        "--num-envs",
        "4",
        "--warmstart-steps",
        "0",
    )
    assert never.returncode == 1, never.stderr[-2000:]
    assert any(line.startswith("FAIL  signal") for line in never.stdout.splitlines()), never.stdout


def test_train_with_doctor_stops_on_a_fail(tmp_path):
    path = build_chat_model("qwen2", tmp_path / "m")
    result = cli(
        "train", "faulty_env:faulty/Never-v0", "--model", str(path), "--doctor", "--warmstart-steps", "0",
        "--num-envs", "8", "--eval-episodes", "4", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    assert "FAIL  signal" in result.stdout
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("lmgym train: failed: ")]
    assert "the doctor found 1 failure(s) (signal)" in line
