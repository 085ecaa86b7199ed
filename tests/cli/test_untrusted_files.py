"""Red-team round 4, files and flags: a model dir, manifest, chat template, checkpoint or flag that
is hostile or broken is one line (exit 2 for input, 1 for a run), fast; never code run, a hang or
a traceback."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import build_chat_model, tiny_model

from lmgym.agents import checkpoints
from lmgym.storage import DataError, load_data, load_json

pytestmark = pytest.mark.timeout(900)


def lmgym(*args, stdin=None, timeout=1500):
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))}
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_line(result, message, status=2):
    assert result.returncode == status, result.stderr[-2000:]
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("lmgym ")]
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return build_chat_model("qwen2", tmp_path_factory.mktemp("chat") / "m")


def copy_of(directory, tmp_path):
    return shutil.copytree(directory, tmp_path / "model")


def test_a_model_dir_whose_code_asks_to_run_is_refused_without_asking(tmp_path):
    """transformers asked `Do you wish to run the custom code? [y/N]`: `y` on stdin ran the dir's Python."""
    model = tmp_path / "evil"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {"AutoConfig": "evil.Config"}}))
    marker = tmp_path / "ran"
    (model / "evil.py").write_text(f"open({str(marker)!r}, 'w')\n")
    result = lmgym("eval", "lmgym/Echo-v0", "--model", str(model), stdin="y\n" * 10)
    one_line(result, "custom code")
    assert not marker.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
        ({"vocab_size": 2**36}, "more than this machine's"),
        ({"num_hidden_layers": "2"}, "num_hidden_layers must be a positive integer"),
    ],
)
def test_a_config_that_cannot_be_built_is_one_line(chat_dir, tmp_path, change, message):
    model = copy_of(chat_dir, tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **change}))
    one_line(lmgym("eval", "lmgym/Echo-v0", "--model", str(model), "--episodes", "2"), message)


def adapters_of(chat_dir, tmp_path):
    """A LoRA adapter dir over ``chat_dir``, as lmgym saves one."""
    from lmgym.agents import PPOAgent, PPOConfig

    agent = PPOAgent(str(chat_dir), config=PPOConfig(model={"peft_config": {"r": 2}}))
    agent.save(tmp_path / "adapters")
    return tmp_path / "adapters"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d / "adapter_config.json", "target_modules is a pattern"),
        (lambda d: d / "lmgym_model.json", "names"),  # itself as its base
    ],
)
def test_adapters_that_would_hang_or_loop_are_one_line(chat_dir, tmp_path, edit, message):
    adapters = adapters_of(chat_dir, tmp_path)
    file = edit(adapters)
    data = json.loads(file.read_text())
    if file.name == "adapter_config.json":
        data["target_modules"] = "(a+)+$" + "a" * 40  # a pattern that backtracks for ever on a long name
    else:
        data["base"] = str(adapters)
    file.write_text(json.dumps(data))
    for command in (["eval", "lmgym/Echo-v0", "--model", str(adapters)], ["export", str(adapters), "--merged", "x"]):
        one_line(lmgym(*command), message)


@pytest.mark.parametrize(
    "manifest, message",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "is not JSON"),
        (json.dumps({"env_kwargs": {"max_digits": "many"}}), "bad argument for lmgym/Calculator-v0"),
        (json.dumps({"env_kwargs": {"no_such": 1}}), "bad argument for lmgym/Calculator-v0"),
        (json.dumps({"tools": 7}), "tools is a int"),
    ],
)
def test_a_manifest_malformed_or_hostile_is_one_line(chat_dir, tmp_path, manifest, message):
    model = copy_of(chat_dir, tmp_path)
    (model / "lmgym_model.json").write_text(manifest)
    one_line(lmgym("eval", "lmgym/Calculator-v0", "--model", str(model), "--episodes", "2"), message)


def test_a_huge_manifest_is_not_read_whole(chat_dir, tmp_path):
    model = copy_of(chat_dir, tmp_path)
    with open(model / "lmgym_model.json", "wb") as f:
        f.truncate(8 * 2**30)  # 8 GiB, sparse
    one_line(lmgym("eval", "lmgym/Echo-v0", "--model", str(model), "--episodes", "2"), "larger than")


@pytest.mark.parametrize(
    "template, message",
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "rendering it failed"),
        ("{{ 'x' * 5000000000 }}", "MemoryError"),
        ("{{ raise_exception('no') }}", "TemplateError: no"),
        ("{% include 'other.jinja' %}", "rendering it failed"),
    ],
)
def test_a_chat_template_that_hangs_allocates_or_raises_is_one_line(chat_dir, tmp_path, template, message):
    model = copy_of(chat_dir, tmp_path)
    (model / "chat_template.jinja").write_text(template)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    result = lmgym("eval", "lmgym/Echo-v0", "--model", str(model), "--chat-template", "--episodes", "2")
    one_line(result, message)


def test_training_state_nested_to_hang_a_walk_is_refused(tmp_path):
    """Lists 40 deep, each holding the next twice: tiny on disk, 2**40 steps for torch's optimizer
    loading, which walks it without a memo."""
    deep: list = []
    for _ in range(40):
        deep = [deep, deep]
    torch.save({"optimizer": {"state": {}, "param_groups": [{"params": deep}]}}, tmp_path / "t.pt")
    with pytest.raises(DataError, match="nested more than 10 deep"):
        load_data(tmp_path / "t.pt")


def test_json_bounds(tmp_path):
    (tmp_path / "a.json").write_text("[" * 50 + "]" * 50)
    with pytest.raises(DataError, match="nested more than 10 deep"):
        load_json(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"x": "y" * 100}))
    with pytest.raises(DataError, match="larger than"):
        load_json(tmp_path / "b.json", max_bytes=50)


@pytest.mark.parametrize(
    "manifest",
    [
        {"files": [1, 2]},
        {"files": {}, "env": ["lmgym/Echo-v0"]},
        {"files": {}, "model_signature": {"w": "big"}},
        {"files": {"model/x": {"bytes": "1", "sha256": "0"}}},
        [],
    ],
)
def test_a_crafted_checkpoint_manifest_is_refused(tmp_path, manifest):
    (tmp_path / checkpoints.CHECKPOINT_MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(checkpoints.CheckpointError, match="is not a checkpoint's manifest"):
        checkpoints.verify(tmp_path)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: nothing answers there"),
        (["--ray", "badaddress"], "expected HOST:PORT"),
        (["--engine-kwargs", "[1]"], "engine_kwargs must be a dict"),
        (["--step-timeout", "inf"], "step_timeout must be a positive number of seconds"),
        (["--env-worker-cpus", "nan", "--env-workers", "1"], "--env-worker-cpus must be at least 0, got nan"),
    ],
)
def test_a_bad_flag_is_one_line_at_once(tmp_path, args, message):
    one_line(lmgym("train", "lmgym/Echo-v0", "--out", str(tmp_path / "run"), *args), message)  # a hang: the timeout


def test_eval_names_a_failing_env_in_one_line(tmp_path, hf_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    tiny_model(len(tokenizer), tokenizer.eos_token_id, n_layer=1, n_embd=32).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    result = lmgym(
        "eval", "faulty_env:faulty/Faulty-v0", "--model", str(tmp_path / "m"), "--episodes", "4",
        "--env-arg", "fault=raise", "--env-arg", "seeds=None",
    )  # fmt: skip
    one_line(result, "step raised ZeroDivisionError", status=1)
    log = result.stderr.split("traceback in ")[1].split(")")[0]
    assert "ZeroDivisionError: the reward function divided by zero" in Path(log).read_text()


def test_a_traceback_that_cannot_be_written_still_leaves_one_line(tmp_path):
    from lmgym.cli.errors import failure_line

    (tmp_path / "file").write_text("")
    line = failure_line(OSError(28, "No space left on device"), tmp_path / "file" / "error.log")
    assert line.startswith("OSError: [Errno 28] No space left on device (its traceback could not be written")
