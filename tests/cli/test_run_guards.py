"""Runs and outputs are never clobbered silently, and every bad argument or run dir is one line, exit 2."""

import fcntl
import json
import os
import subprocess
import sys

import pytest
from helpers import tiny_model

from lmgym import ByteTokenizer
from lmgym.cli import UsageError, main
from lmgym.cli.spec import RunSpec
from lmgym.report import build_report

pytestmark = pytest.mark.timeout(600)


def lmgym(*args):
    return subprocess.run([sys.executable, "-m", "lmgym.cli", *args], capture_output=True, text=True, timeout=600)


def one_line(result, message):
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--eval-episodes", "0"], "--eval-episodes must be at least 1"),
        (["train", "--eval-episodes", "-5"], "--eval-episodes must be at least 1"),
        (["train", "--threads", "-1"], "--threads must be at least 1"),
        (["train", "--generation-kwargs", "[1]"], "--generation-kwargs must be a JSON object"),
        (["train", "--kl-coef", "nan"], "kl_coef must be a finite number"),
        (["train", "--gamma", "inf"], "gamma must be a finite number"),
        (["eval", "lmgym/Echo-v0", "--model", "x", "--episodes", "0"], "--episodes must be at least 1"),
        (["view", ".", "--port", "99999"], "--port must be between 0 and 65535"),
        (["view", ".", "--port", "-1"], "--port must be between 0 and 65535"),
    ],
)
def test_a_bad_argument_is_one_line(args, message, capsys):
    assert main(args) == 2  # in-process: the same main() the lmgym command runs
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_an_existing_run_is_not_overwritten(tmp_path):
    (tmp_path / "metrics.csv").write_text("step\n0\n")
    one_line(lmgym("train", "--out", str(tmp_path)), "holds a run already (metrics.csv): continue it with --resume")
    assert (tmp_path / "metrics.csv").read_text() == "step\n0\n"


def test_a_second_train_on_the_same_out_is_refused(tmp_path):
    with open(tmp_path / ".lmgym.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        one_line(lmgym("train", "--out", str(tmp_path)), "another lmgym train is writing to")


def test_overwrite_clears_only_the_run(tmp_path):
    from lmgym.cli.rundir import claim_run_dir

    for name in ("metrics.csv", "episodes.jsonl", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "checkpoints" / "update-000001").mkdir(parents=True)
    args = RunSpec("train", "lmgym/Echo-v0", out=tmp_path, overwrite=True)
    lock = claim_run_dir(args)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lmgym.lock", "notes.txt"]
    with pytest.raises(UsageError, match="another lmgym train"):
        claim_run_dir(args)  # the lock is held until the run ends
    lock.close()


def test_export_refuses_a_file_or_a_non_empty_dir(tmp_path):
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    (adapters / "adapter_config.json").write_text("{}")
    (tmp_path / "file").write_text("x")
    one_line(lmgym("export", str(adapters), "--merged", str(tmp_path / "file")), "is a file")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text("{}")
    one_line(lmgym("export", str(adapters), "--merged", str(tmp_path / "full")), "is not empty")
    assert (tmp_path / "full" / "config.json").read_text() == "{}"


def test_eval_on_a_damaged_model_names_the_file(tmp_path):
    model = tiny_model(258, 256, n_layer=1, n_embd=32)
    model.save_pretrained(tmp_path / "model")
    ByteTokenizer().save_pretrained(tmp_path / "model")
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    one_line(lmgym("eval", "lmgym/Echo-v0", "--model", str(tmp_path / "model")), "model.safetensors' is damaged")


def test_resume_from_a_damaged_checkpoint_names_the_file(tmp_path):
    import gymnasium as gym

    from lmgym.agents import PPOAgent, PPOConfig

    agent = PPOAgent(
        tiny_model(258, 256, n_layer=1, n_embd=32), ByteTokenizer(), config=PPOConfig(episodes_per_update=4)
    )
    agent.learn(gym.make("lmgym/Echo-v0"), 4, checkpoint_dir=tmp_path / "checkpoints", progress_bar=False)
    state = tmp_path / "checkpoints" / "last" / "training_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    result = lmgym("train", "lmgym/Echo-v0", "--out", str(tmp_path / "new"), "--resume", str(tmp_path))
    one_line(result, "training_state.pt' is damaged")


def test_view_renders_what_it_can_and_names_what_it_skipped(tmp_path, capsys):
    good = {"kind": "train", "update": 1, "text": ["Q", "a"], "mask": [0, 1], "adv": [None, 0.5], "rewards": [1.0]}
    lines = [
        json.dumps(good).encode(),
        b"[1, 2]",
        b"\x00\xff\xfe binary",
        json.dumps(good).encode()[:-5] + "é".encode()[:1],
    ]
    (tmp_path / "episodes.jsonl").write_bytes(b"\n".join(lines))
    (tmp_path / "config.json").write_text('{"kl_coef": NaN, "gamma": 1.0}')
    (tmp_path / "summary.json").write_text("garbage{")
    (tmp_path / "metrics.csv").write_text("update,loss\n1,0.5\n")
    assert main(["view", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "3 unreadable lines of episodes.jsonl" in err and "summary.json" in err and "metrics.csv" in err
    html = (tmp_path / "report.html").read_text()
    data = json.loads(html.split("const DATA = ", 1)[1].split(";\n", 1)[0])
    assert len(data["episodes"]) == 1 and data["config"] == {"kl_coef": None, "gamma": 1.0}
    assert main(["view", str(tmp_path), "--out", str(tmp_path)]) == 2  # --out is a directory


def test_view_skips_records_that_are_not_episodes(tmp_path):
    (tmp_path / "episodes.jsonl").write_text('{"kind": "train"}\n{"text": ["a"], "mask": [1, 0]}\n')
    path, skipped = build_report(tmp_path)
    assert skipped == ["2 records that are not episodes"] and path.is_file()


def test_warm_start_cache_damaged_is_rebuilt(tmp_path, monkeypatch, capsys):
    from lmgym.agents.warmstart import WarmStartConfig, default_model

    monkeypatch.setenv("LMGYM_CACHE", str(tmp_path))
    config = WarmStartConfig(steps=1, demonstrations=4)
    _, _, path = default_model("lmgym/Echo-v0", {}, config)
    (path / "config.json").write_bytes(b"")  # what a kill mid-write used to leave
    model, _, again = default_model("lmgym/Echo-v0", {}, config)
    assert again == path and "unreadable: rebuilding it" in capsys.readouterr().out
    assert os.path.getsize(path / "config.json") > 0 and model is not None


def test_a_live_lock_names_its_process_and_a_stale_one_is_taken_over(tmp_path, capsys):
    """Two processes: the holder is named; once it is killed (-9, no unlock), the lock is taken over in one line."""
    import signal
    import subprocess
    import sys

    from lmgym.cli.rundir import claim_run_dir

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from lmgym.cli.rundir import claim_run_dir; "
            "from lmgym.cli.spec import RunSpec; from pathlib import Path; "
            f"lock = claim_run_dir(RunSpec('train', 'lmgym/Echo-v0', out=Path({str(tmp_path)!r}))); "
            "print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    spec = RunSpec("train", "lmgym/Echo-v0", out=tmp_path)
    with pytest.raises(UsageError, match=rf"another lmgym train \(pid {holder.pid} on .* since .*\) is writing to"):
        claim_run_dir(spec)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = claim_run_dir(spec)
    assert f"took over the run lock of pid {holder.pid} on" in capsys.readouterr().out
    lock.close()
