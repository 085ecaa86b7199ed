"""RL from rewards alone: the control run, the no-signal stop, evaluations with their uncertainty,
answers as chat models write them, and the pure-RL recipe end to end (a smoke run, not a learning run)."""

import json
import math
import os
import subprocess
import sys
from collections import Counter

import gymnasium as gym
import pytest
import torch
from helpers import build_chat_model, tiny_model

import lmgym  # noqa: F401
from lmgym.agents import PPOAgent, PPOConfig
from lmgym.agents.callbacks import HINTS, NoSignal, help_line
from lmgym.agents.evaluation import evaluate
from lmgym.agents.intervals import mean_interval, pass_at_k, wilson
from lmgym.agents.rewards import trained_rewards
from lmgym.agents.trajectories import Episode, Trajectories
from lmgym.compat import installed
from lmgym.tokenizers import ByteTokenizer

pytestmark = pytest.mark.timeout(1800)


def episode(rewards, group=0):
    n = len(rewards)
    mask = [False] + [True] * n
    return Episode(torch.zeros(n + 1, dtype=torch.long), mask, list(range(1, n + 1)), list(rewards), group=group)


def test_the_shuffled_control_keeps_the_returns_and_breaks_the_pairing():
    batch = Trajectories([episode([float(i % 7 == 0)], group=i // 8) for i in range(64)])
    returns = [e.return_ for e in batch]
    moved = 0
    for update in range(5):
        shuffled = [sum(r) for r in trained_rewards(batch.episodes, control="shuffle", seed=[0, update])]
        assert Counter(shuffled) == Counter(returns)  # the same distribution
        moved += sum(a != b for a, b in zip(shuffled, returns))
    assert moved > 20  # which episode earned it is lost
    assert [e.return_ for e in batch] == returns  # the episodes keep what the env gave
    multi = [episode([0.0, 0.5, 0.5]), episode([0.0, 0.0, 0.0])]
    shuffled = trained_rewards(multi, control="shuffle", seed=1)
    assert sorted(sum(r) for r in shuffled) == [0.0, 1.0] and all(r[:2] == [0.0, 0.0] for r in shuffled)


def test_credit_by_episode_moves_each_return_onto_its_last_turn():
    batch = [episode([0.0, 0.3, 0.0, 0.5]), episode([1.0]), episode([0.2, -0.2, 0.0])]
    assert trained_rewards(batch, credit="episode") == [[0.0, 0.0, 0.0, 0.8], [1.0], [0.0, 0.0, 0.0]]
    assert trained_rewards(batch, credit="turn") == [e.rewards for e in batch]


def test_reward_transforms_are_config_fields_the_update_applies():
    tok = ByteTokenizer()
    agent = PPOAgent(tiny_model(tok.vocab_size, tok.eos_token_id), tokenizer=tok, config=PPOConfig(credit="episode"))
    e = episode([0.5, 0.25])
    e.logprobs = e.ref_logprobs = e.values = torch.zeros(e.length)
    turns, (rewards,), _ = agent.compute_rewards(Trajectories([e]))
    assert turns == [[0.0, 0.75]] and rewards.tolist() == [0.0, 0.0, 0.75] and e.rewards == [0.5, 0.25]


def test_no_signal_says_so_once_and_stops_after_batches_in_a_row():
    agent = type("A", (), {"config": PPOConfig(estimator="rloo", group_size=2)})()
    said = []
    check = NoSignal(patience=3, say=said.append)
    flat = Trajectories([episode([0.0], group=g) for g in range(4)])
    grouped = Trajectories([episode([float(g)], group=g) for g in (0, 0, 1, 1)])
    useful = Trajectories([episode([r], group=0) for r in (0.0, 1.0)])
    assert check.on_collect(agent, flat) is None and len(said) == 1 and "all returned 0" in said[0]
    assert "RL has nothing to reinforce" in said[0] and "a tool (--tools calc)" in said[0]
    assert check.on_collect(agent, useful) is None  # a batch with signal starts the count again
    assert check.on_collect(agent, grouped) is None and check.on_collect(agent, flat) is None
    assert check.on_collect(agent, flat) is False and len(said) == 1  # three in a row: stop; said once
    assert "3 batches in a row" in check.stopped and "returned 0" in check.stopped
    patient = NoSignal(patience=None, say=said.append)
    assert all(patient.on_collect(agent, flat) is None for _ in range(5)) and patient.stopped is None


def test_the_advice_leaves_out_what_the_run_has():
    assert help_line() == (
        "An answer format the model writes (--env-arg answer_format=final), an easier task (--env-arg config=...), "
        "a tool (--tools calc), a warm start on the oracle (--warmstart-steps N), or a larger group would help"
    )
    assert help_line(set(HINTS) - {"group"}) == "A larger group would help"
    said = []
    agent = type("A", (), {"config": PPOConfig()})()
    NoSignal(say=said.append, help=help_line({"tools"})).on_collect(agent, Trajectories([episode([0.0])] * 2))
    assert "--tools" not in said[0] and said[0].endswith("or a larger group would help")


def test_no_signal_counts_successes_not_only_reward_variance():
    agent = type("A", (), {"config": PPOConfig()})()
    said = []
    check = NoSignal(patience=2, say=said.append)

    def answered(rewards, correct):
        e = episode(rewards)
        return Episode(e.tokens, e.action_mask, e.turn_ends, e.rewards, infos=[{"correct": c} for c in correct])

    partial = Trajectories([answered([r], [False]) for r in (0.0, 0.03, 0.1, 0.0)])  # reasoning-gym's partial credit
    progress = Trajectories([answered([r, 0.0], [False, False]) for r in (0.0, 0.5)])  # a text world's score
    solved = Trajectories([answered([r], [r == 1.0]) for r in (0.0, 0.03, 1.0)])
    assert check.on_collect(agent, partial) is None and "none of its 4 episodes succeeded" in said[0]
    assert "answer_format" in said[0] and "--warmstart-steps" in said[0]
    assert check.on_collect(agent, progress) is None and check.on_collect(agent, solved) is None
    assert check.on_collect(agent, partial) is None and check.on_collect(agent, partial) is False
    assert "partial credit" in check.stopped and len(said) == 1


def test_intervals_and_pass_at_k_by_hand():
    lo, hi = wilson(10, 40)
    p, n, z = 0.25, 40, 1.959963984540054
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) and pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_an_evaluation_carries_its_interval_and_pass_at_k():
    agent = PPOAgent(tiny_model(258, 256, n_layer=1, n_embd=32), tokenizer=ByteTokenizer(), config=PPOConfig(seed=0))
    envs = gym.make_vec("lmgym/Echo-v0", num_envs=8)
    stats, batch = evaluate(agent, envs, 8, samples=4)
    wins = sum(e.success for e in batch)
    assert stats["success_ci"] == list(wilson(wins, 8)) and stats["episodes"] == 8
    assert stats["return_ci"] == list(mean_interval(batch.returns))  # the score's interval too
    sampled = stats["sampled"]
    assert sampled["k"] == 4 and sampled["episodes"] == 32 and 0 <= sampled["pass@4"] <= 1
    assert sampled["pass@4"] >= sampled["success"]  # at least one of four does as well as one on average


@pytest.mark.skipif(not installed("reasoning_gym"), reason="pip install 'lmgym[reasoning-gym]'")
def test_a_worked_example_and_the_final_answer_as_chat_models_write_it():
    env = gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", example=True, answer_format="final")
    prompt, _ = env.reset(seed=3)
    assert prompt.startswith("An example of this task, answered:\n") and prompt.count("<answer>") == 2
    assert (
        gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", example=True)
        .reset(seed=4)[0]
        .startswith(prompt.split("Now this one:")[0])
    )  # one example for every seed: no held-out answer in it
    answer = env.unwrapped.entry["answer"]
    tok = env.unwrapped.tokenizer
    for reply, correct in [
        (f"Let me see. The answer is **{answer}**.", True),
        (f"2 + 2 = 4, so the result is = {answer}", True),
        (f"The answer is {answer}. No wait, the answer is {int(answer) + 1}", False),  # only the final one counts
        (f"It could be {answer} or {int(answer) + 1} or {int(answer) + 2}, I think, but I am not sure", False),
    ]:
        env.reset(seed=3)
        assert env.step(tok.encode(reply))[4]["correct"] is correct, reply
    with pytest.raises(ValueError, match="answer_format must be one of"):
        gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", answer_format="loose")


@pytest.mark.skipif(not installed("reasoning_gym"), reason="pip install 'lmgym[reasoning-gym]'")
def test_a_chat_models_answers_are_read_as_it_writes_them_by_default(tmp_path):
    from transformers import AutoTokenizer

    chat = AutoTokenizer.from_pretrained(build_chat_model("qwen2", tmp_path / "m"))
    env = gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", tokenizer=chat)
    plain = gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic")  # the byte tokenizer: no chat template
    assert env.unwrapped.answer_format == "final" and plain.unwrapped.answer_format == "tags"
    for e in (env, plain):
        e.reset(seed=3)
        reply = f"Adding them up, the answer is {e.unwrapped.entry['answer']}."
        info = e.step(e.unwrapped.tokenizer.encode(reply))[4]
        assert info["correct"] is (e is env)  # prose is read for the chat model; the tags are asked of the other
    tagged = gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", tokenizer=chat, answer_format="tags")
    assert tagged.unwrapped.answer_format == "tags"  # what the user says wins


def lmgym_cli(*args):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=1500, env=env
    )


def test_rewards_alone_end_to_end_says_what_it_picked_and_reports_intervals(tmp_path):
    """The pure-RL recipe on a tiny chat model (a smoke run: nothing is learned), its control, and
    an evaluation with pass@k of what it saved."""
    path = build_chat_model("qwen2", tmp_path / "m")
    out = tmp_path / "run"
    small = ["--episodes", "16", "--num-envs", "8", "--eval-episodes", "8", "--episodes-per-update", "16"]
    result = lmgym_cli(
        "train", "lmgym/Echo-v0", "--model", str(path), "--chat-template", "--warmstart-steps", "0",
        *small, "--samples", "2", "--reward-control", "shuffle", "--allow-no-signal", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("recipe for a pretrained model: ")]
    assert "LoRA r=16, learning_rate 0.0003, from rewards alone: rloo in groups of 8, temperature 0.7," in line
    assert "the turn budget from the model's sampled replies" in line
    assert any(x.startswith("turn budget: ") for x in result.stdout.splitlines())
    assert "95% interval" in result.stdout and "pass@2" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward_control"] == "shuffle" and summary["estimator"] == "rloo"
    for phase in ("before", "after"):
        lo, hi = summary[phase]["success_ci"]
        assert lo <= summary[phase]["success"] <= hi and summary[phase]["sampled"]["k"] == 2
    result = lmgym_cli("eval", "lmgym/Echo-v0", "--model", str(out / "model"), "--episodes", "8", "--samples", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "95% interval" in result.stdout and "pass@2" in result.stdout


@pytest.mark.skipif(not installed("reasoning_gym"), reason="pip install 'lmgym[reasoning-gym]'")
def test_a_run_without_signal_says_so_and_stops_without_spending_its_budget(tmp_path):
    path = build_chat_model("qwen2", tmp_path / "m")  # untrained: it never writes the sum
    result = lmgym_cli(
        "train", "lmgym/ReasoningGym-v0", "--env-arg", "task=basic_arithmetic", "--model", str(path),
        "--warmstart-steps", "0", "--env-arg", "max_action_tokens=8", "--env-arg", "partial_credit=False",
        "--env-arg", "answer_format=final", "--episodes", "64", "--num-envs", "8",
        "--eval-episodes", "8", "--episodes-per-update", "16", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (warning,) = [x for x in result.stdout.splitlines() if x.startswith("warning: batch 1: ")]
    assert "RL has nothing to reinforce" in warning and "--warmstart-steps N" in warning
    assert "answer_format" not in warning and "--tools calc" in warning  # what the run has is not advised
    (stop,) = [x for x in result.stdout.splitlines() if x.startswith("stopped after ")]
    assert stop.startswith("stopped after 32 episodes: 3 batches in a row")  # the third is not trained on
    assert "--allow-no-signal" in stop


def test_a_run_from_rewards_alone_sizes_itself_to_enough_updates():
    from lmgym.agents.defaults import PURE_RL_MIN_UPDATES
    from lmgym.cli.train import budget_episodes

    agent = type("A", (), {"config": PPOConfig(episodes_per_update=64)})()
    assert budget_episodes(agent, 300.0, 20 * 60, eval_every=0) == 4 * 64  # 20 minutes hold 4 updates of 5
    assert budget_episodes(agent, 300.0, 20 * 60, eval_every=0, least=PURE_RL_MIN_UPDATES) == 8 * 64
    assert budget_episodes(agent, 60.0, 20 * 60, eval_every=0, least=PURE_RL_MIN_UPDATES) == 20 * 64  # more fit


def test_the_run_says_how_long_it_will_take_before_its_first_update(capsys):
    from lmgym.agents.defaults import PURE_RL_MIN_UPDATES
    from lmgym.cli.train import UPDATE_EPISODE_COST, say_estimate

    agent = type("A", (), {"config": PPOConfig(episodes_per_update=64), "num_updates": 0, "num_episodes": 0})()
    pace = 0.5  # seconds an evaluated episode
    say_estimate(agent, None, pace, 0, PURE_RL_MIN_UPDATES)  # sized: an update is 64 * UPDATE_EPISODE_COST * 0.5 s
    line = capsys.readouterr().out
    minutes = PURE_RL_MIN_UPDATES * 64 * UPDATE_EPISODE_COST * pace / 60
    assert line.startswith(f"estimated: {PURE_RL_MIN_UPDATES} updates of 64 take about {minutes:.0f} min"), line
    say_estimate(agent, 128, pace, 0, PURE_RL_MIN_UPDATES)  # --episodes 128: 2 updates
    assert capsys.readouterr().out.startswith(
        f"estimated: 2 updates of 64 take about {2 * 64 * UPDATE_EPISODE_COST * pace / 60:.0f} min"
    )
    say_estimate(agent, 128, 0.001, 0, PURE_RL_MIN_UPDATES)  # a second in all: not worth a line
    assert capsys.readouterr().out == ""
