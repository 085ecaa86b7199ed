"""End to end: ``lmgym train`` with a tiny budget, then ``lmgym eval`` on what it wrote."""

import csv
import json
import os
import subprocess
import sys

import pytest
from helpers import tiny_model


def lmgym(*args, env=None, timeout=1500):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


# A tiny budget: 8 envs, 8 held-out episodes, a 5-step warm start, 8 episodes per update (a
# model this little trained may earn nothing in its first batch: it trains anyway).
SMOKE_ARGS = (
    "--allow-no-signal",
    "--num-envs",
    "8",
    "--eval-episodes",
    "8",
    "--warmstart-steps",
    "5",
    "--episodes-per-update",
    "8",
    "--seed",
    "3",
)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke")
    out = root / "run"
    result = lmgym(
        "train",
        "--episodes",
        "16",
        "--eval-every",
        "1",
        *SMOKE_ARGS,
        "--out",
        str(out),
        env={"LMGYM_CACHE": str(root / "cache")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.mark.slow
def test_train_writes_every_output(smoke_run):
    out, result = smoke_run
    assert "success (greedy)" in result.stdout and "tool-call rate" in result.stdout and "wall time" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == "lmgym/Calculator-v0" and summary["seed"] == 3
    made = summary["provenance"]  # what a replay needs
    assert made["config"]["seed"] == 3 and made["bit_exact"] and made["not_bit_exact_because"] == []
    assert made["torch"] and made["transformers"] and made["python"] and made["threads"] >= 1
    for phase in ("before", "after"):
        assert set(summary[phase]) == {"success", "success_ci", "tool_rate", "mean_return", "return_ci", "errors"}
        assert all(0.0 <= summary[phase][k] <= 1.0 for k in ("success", "tool_rate", "mean_return"))
        lo, hi = summary[phase]["success_ci"]  # the 95% Wilson interval
        assert lo <= summary[phase]["success"] <= hi
        low, high = summary[phase]["return_ci"]  # the mean return's 95% interval
        assert low <= summary[phase]["mean_return"] <= high
        errors = summary[phase]["errors"]  # Calculator-v0 classifies every episode's outcome
        assert set(errors) <= {"correct", "no tool", "operand copy", "result copy", "malformed"}
        assert abs(sum(errors.values()) - 1) < 1e-9 and errors.get("correct", 0) == summary[phase]["success"]
    assert summary["wall_seconds"] > 0
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {
        "step",
        "loss/policy",
        "loss/value",
        "policy/approx_kl",
        "env/return",
        "env/success",
        "objective/kl",
        "eval/success",
    } <= set(rows[0])
    assert len(rows) == 3  # the evaluation before training, then two updates
    assert float(rows[0]["eval/return"]) == pytest.approx(summary["before"]["mean_return"])
    assert list(out.glob("tensorboard/**/events.out.tfevents*"))
    from PIL import Image

    with Image.open(out / "learning_curve.png") as img:
        assert img.size[0] > 300 and img.size[1] > 200
    transcripts = (out / "transcripts.md").read_text()
    assert "## before training" in transcripts and "## after training" in transcripts and "What is " in transcripts


@pytest.mark.slow
def test_trained_model_reloads_and_generates(smoke_run):
    import torch
    from transformers import AutoModelForCausalLM

    from lmgym.agents import PPOAgent

    out, _ = smoke_run
    model = AutoModelForCausalLM.from_pretrained(out / "model")
    generated = model.generate(torch.tensor([[87, 104, 97, 116]]), max_new_tokens=5, do_sample=False, pad_token_id=257)
    assert generated.shape == (1, 9)
    agent = PPOAgent.load(out / "model")
    (calc_id,) = agent.tokenizer.encode("<calc>")  # the env's tags are single tokens
    assert calc_id >= 258


@pytest.mark.slow
def test_eval_prints_a_table_and_json(smoke_run):
    out, _ = smoke_run
    table = lmgym("eval", "lmgym/Calculator-v0", "--model", str(out / "model"), "--episodes", "6", "--sampled")
    assert table.returncode == 0, table.stderr[-2000:]
    assert "greedy" in table.stdout and "sampled" in table.stdout and "success" in table.stdout
    assert "evaluating (greedy)" in table.stderr and "tokens_per_s=" in table.stderr  # the progress bar
    result = lmgym("eval", "lmgym/Calculator-v0", "--model", str(out / "model"), "--episodes", "6", "--json")
    data = json.loads(result.stdout)
    assert {"success", "tool_rate", "mean_return", "episodes"} <= set(data) and data["episodes"] == 6
    assert "sampled" not in data  # greedy only unless --sampled


@pytest.mark.slow
def test_train_takes_a_local_hf_model(tmp_path, hf_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    model = tiny_model(len(tokenizer), tokenizer.eos_token_id, n_layer=1, n_embd=32)
    model.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    result = lmgym(
        "train",
        "--model",
        str(tmp_path / "hf"),
        "--episodes",
        "8",
        "--num-envs",
        "4",
        "--eval-episodes",
        "4",
        "--eval-every",
        "0",
        "--episodes-per-update",
        "4",
        "--out",
        str(tmp_path / "run"),
        "--add-special-tokens",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    saved = AutoTokenizer.from_pretrained(tmp_path / "run" / "model")
    assert "<calc>" in saved.get_vocab() and len(saved) == len(tokenizer) + 6  # the env's tags were added
    assert "memory before activations" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "lmgym/Calculater-v0"], "unknown env id 'lmgym/Calculater-v0'; did you mean lmgym/Calculator-v0"),
        (["train", "--model", "./no/such/model"], "does not exist"),
        (["train", "--episodes", "0"], "--episodes must be at least 1"),
        (["eval", "lmgym/Calculator-v0", "--model", "./no/such/model"], "does not exist"),
    ],
)
def test_bad_input_is_one_clear_line(args, message):
    result = lmgym(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_out_that_is_a_file(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("x")
    result = lmgym("train", "--out", str(target))
    assert result.returncode == 2 and "is a file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_train_resumes_from_its_last_checkpoint(smoke_run):
    out, _ = smoke_run
    result = lmgym(
        "train",
        "--episodes",
        "24",
        "--eval-every",
        "0",
        *SMOKE_ARGS,
        "--out",
        str(out),
        "--resume",
        str(out / "checkpoints" / "last"),
        env={"LMGYM_CACHE": str(out.parent / "cache")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["episodes"] == 24  # 16 before, 8 more
    with open(out / "metrics.csv", newline="") as f:
        steps = [int(float(r["step"])) for r in csv.DictReader(f)]
    assert steps == [0, 1, 2, 3]


def test_default_model_on_long_episodes_plays_with_its_demonstrations_budgets():
    """An env of 50 turns or more gets the turns (and tokens) its oracle needs, twice over; a
    short env, and what ``--env-arg`` sets, stay as they are."""
    import gymnasium as gym

    from lmgym.cli.session import default_budgets, run_config
    from lmgym.cli.spec import RunSpec

    gym.register("lmgym-test/LongEcho-v0", entry_point="lmgym.envs.echo:EchoEnv", max_episode_steps=60)
    sized = default_budgets(RunSpec("train", "lmgym-test/LongEcho-v0"))
    assert sized.env_kwargs == {"max_episode_steps": 2}  # Echo's oracle answers in 1 turn; 8 tokens a turn stay
    config = run_config(sized)  # 16 episodes an optimizer step, 4 at a time (a text world's are long)
    assert (config.mini_batch_size, config.gradient_accumulation_steps, config.model.forward_batch_size) == (4, 4, 4)
    flagged = default_budgets(RunSpec("train", "lmgym-test/LongEcho-v0", settings={("mini_batch_size",): 8}))
    assert (run_config(flagged).mini_batch_size, run_config(flagged).gradient_accumulation_steps) == (8, 1)
    given = RunSpec("train", "lmgym-test/LongEcho-v0", env_kwargs={"max_episode_steps": 5})
    assert default_budgets(given).env_kwargs == {"max_episode_steps": 5}
    assert default_budgets(RunSpec("train", "lmgym/Calculator-v0")) == RunSpec("train", "lmgym/Calculator-v0")
