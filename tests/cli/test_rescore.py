"""lmgym rescore: a run's recorded episodes scored again by a new reward, beside the old rewards,
and shown by lmgym view."""

import hashlib
import json
import subprocess
import sys

import gymnasium as gym
import pytest
import torch

import lmgym
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.recording import EPISODES_FILE
from lmgym.agents.records import episode_record
from lmgym.agents.trajectories import EpisodeBuilder
from lmgym.agents.warmstart import tiny_gpt2
from lmgym.report import read_jsonl

TASKS = [{"prompt": f"Say {w}.\n", "target": w, "n": i} for i, w in enumerate(["cat", "dog", "owl", "elk"])]

REWARDS = """
def target_in_prompt(prompt, completion, info):
    assert isinstance(completion, str)
    return float(info["target"] in prompt)

def longer_than(prompt, completion, info):
    return len(completion) / 100

def broken(prompt, completion, info):
    return 1 / 0
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = lmgym.ByteTokenizer()
    config = PPOConfig(episodes_per_update=8, mini_batch_size=8, run={"record_episodes": 4}, seed=0)
    agent = PPOAgent(tiny_gpt2(tokenizer, n_layer=1, n_embd=32), tokenizer, config=config)
    envs = gym.make_vec("lmgym/Prompt-v0", num_envs=4, tokenizer=tokenizer, prompts=TASKS, max_action_tokens=8)
    path = tmp_path_factory.mktemp("run")
    agent.learn(envs, total_episodes=16, log_dir=path, progress_bar=False)
    (path.parent / "my_rewards.py").write_text(REWARDS)
    return path


def cli(run_dir, *args):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=300, cwd=run_dir.parent
    )


def test_records_keep_the_text_and_task_a_reward_needs(run_dir):
    records, _ = read_jsonl(run_dir / EPISODES_FILE)
    for r in records:
        task = TASKS[r["info"]["n"]]
        assert r["prompt"] == task["prompt"] and r["info"]["target"] == task["target"]
        assert len(r["completions"]) == len(r["turn_ends"]) == 1
        assert r["completions"][0] == r["info"]["completion"]  # the text the env scored


def test_rescore_writes_beside_the_old_rewards_and_view_shows_both(run_dir):
    before = hashlib.sha256((run_dir / EPISODES_FILE).read_bytes()).hexdigest()
    records, _ = read_jsonl(run_dir / EPISODES_FILE)
    result = cli(run_dir, "rescore", str(run_dir), "--reward", "my_rewards:target_in_prompt")
    assert result.returncode == 0, result.stderr
    path = run_dir / "rescores" / "target_in_prompt.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len(records) and all(r["return"] == 1.0 and r["success"] for r in rows)
    assert [r["old_return"] for r in rows] == [r["return"] for r in records]
    old = sum(r["success"] for r in records if r["kind"] == "held-out") / sum(r["kind"] == "held-out" for r in records)
    assert "held-out" in result.stdout and f"{old:6.1%} -> 100.0%" in result.stdout, result.stdout
    assert hashlib.sha256((run_dir / EPISODES_FILE).read_bytes()).hexdigest() == before  # never over the old ones

    again = cli(run_dir, "rescore", str(run_dir), "--reward", "my_rewards.py:longer_than")
    assert again.returncode == 0, again.stderr
    lengths = [json.loads(line)["return"] for line in (run_dir / "rescores" / "longer_than.jsonl").open()]
    assert lengths == [len(r["completions"][0]) / 100 for r in records]
    assert cli(run_dir, "rescore", str(run_dir), "--reward", "my_rewards:target_in_prompt").returncode == 0
    assert (run_dir / "rescores" / "target_in_prompt-2.jsonl").is_file()  # a second one, not over the first

    view = cli(run_dir, "view", str(run_dir))
    assert view.returncode == 0, view.stderr
    html = (run_dir / "report.html").read_text()
    data = json.loads(
        html[html.index("DATA = ") + 7 : html.index(";\n", html.index("DATA = "))].replace("\\u003c", "<")
    )
    assert data["summary"]["rescored"]["target_in_prompt"]["success"] == 1.0
    assert all({r["by"] for r in e["rescored"]} >= {"target_in_prompt", "longer_than"} for e in data["episodes"])


def test_a_broken_reward_names_its_episode_and_writes_nothing(run_dir):
    result = cli(run_dir, "rescore", str(run_dir), "--reward", "my_rewards:broken")
    assert result.returncode == 1 and "line 1 of episodes.jsonl" in result.stderr, result.stderr
    assert "ZeroDivisionError" in result.stderr and not (run_dir / "rescores" / "broken.jsonl").exists()
    for spec, said in [
        ("my_rewards", "not module:function"),
        ("nope:f", "cannot import"),
        ("my_rewards:nope", "no function"),
    ]:
        bad = cli(run_dir, "rescore", str(run_dir), "--reward", spec)
        assert bad.returncode == 2 and said in bad.stderr, bad.stderr


def test_a_record_has_each_turns_completion():
    tok = lmgym.ByteTokenizer()
    b = EpisodeBuilder(tok.encode("Q?"), seed=3, reset_info={"target": "ab", "f": object()})
    b.add_action(tok.encode("first"), 0.0, {"n": 1})
    b.add_observation(tok.encode(" then "))
    b.add_action(tok.encode("second"), 1.0, {"n": 2})
    record = episode_record(b.build(), tok, 0, "train")
    assert record["prompt"] == "Q?" and record["completions"] == ["first", "second"]
    assert record["info"] == {"target": "ab", "n": 2}  # the reset info, updated by the last turn's; JSON values only
