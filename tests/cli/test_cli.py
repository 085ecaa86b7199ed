import subprocess
import sys

import pytest

from lmgym.cli import main, parse_kwargs


def run_cli(*args, stdin=""):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_list_shows_every_env(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "lmgym/Calculator-v0" in out and "lmgym/Echo-v0" in out
    assert "arithmetic question" in out


def test_play_calculator_through_stdin():
    result = run_cli("play", "lmgym/Calculator-v0", "--seed", "0", stdin="<calc>6*7</calc>\n<answer>1</answer>\n")
    assert result.returncode == 0, result.stderr
    assert "What is " in result.stdout and "<result>42</result>" in result.stdout
    assert "[reward 0]" in result.stdout and "episode over (terminated), return 0" in result.stdout


def test_play_oracle_answer_gets_reward():
    import gymnasium as gym

    env = gym.make("lmgym/Echo-v0")
    env.reset(seed=4)
    answer = env.get_wrapper_attr("oracle")()
    result = run_cli("play", "lmgym/Echo-v0", "--seed", "4", stdin=answer + "\n")
    assert "[reward 1]" in result.stdout and "return 1" in result.stdout


def test_unknown_env_is_one_clear_line():
    result = run_cli("play", "lmgym/Calculater-v0")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == ("lmgym play: error: unknown env id 'lmgym/Calculater-v0'; did you mean lmgym/Calculator-v0?")
        or "did you mean lmgym/Calculator-v0" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_parse_kwargs():
    assert parse_kwargs(["max_digits=2", "operators=+-"]) == {"max_digits": 2, "operators": "+-"}
    assert parse_kwargs(['config={"negative": false, "n": [1, 2]}']) == {"config": {"negative": False, "n": [1, 2]}}


def test_every_command_prints_its_help():
    """A '%' in one command's help once made `lmgym --help` a traceback."""
    from lmgym.cli import build_parser

    parser = build_parser()
    assert "doctor" in parser.format_help()
    (sub,) = [a for a in parser._actions if a.choices and "train" in a.choices]
    for name, command in sub.choices.items():
        assert command.format_help().startswith("usage: "), name


def test_tools_from_the_command_line_count_as_turns():
    """``--tools``: the env's turn limit wraps the tools too (``gym.make``'s is inside and never
    sees a tool call), so a model that keeps calling one stops at the limit."""
    import gymnasium as gym

    from lmgym.cli.options import with_tools

    env = with_tools(gym.make("lmgym/Echo-v0", max_episode_steps=3, max_action_tokens=32), "calc")
    tokenizer = env.get_wrapper_attr("tokenizer")
    obs, _ = env.reset(seed=0)
    assert "<calc>EXPRESSION</calc>" in obs  # the prompt says how to call it
    flags = [env.step(tokenizer.encode("<calc>1+1</calc>"))[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_each_flag_is_defined_once_in_the_cli_package():
    """A flag string appears in one ``add_argument`` call in lmgym/cli (shared groups in
    ``options``), and every command's parser builds (argparse refuses a flag defined twice)."""
    import ast
    import collections
    import pathlib

    import lmgym.cli

    found = collections.Counter()
    for path in pathlib.Path(lmgym.cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                    found[first.value] += 1
    assert found["--env-arg"] == found["--model"] == found["--seed"] == found["--num-envs"] == 1
    assert [flag for flag, n in found.items() if n > 1] == []
    parser = lmgym.cli.build_parser()
    for command in ("train", "eval", "doctor", "play", "view", "docs", "export", "list", "rescore"):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([command, "--help"])
        assert exit_.value.code == 0
