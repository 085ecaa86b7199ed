"""The task-library adapters: reasoning-gym, TextArena and GEM under gym.make, with lmgym's contract."""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import tiny_model

from lmgym import ByteTokenizer  # (and registers the ids)
from lmgym.compat import LibraryError, installed

pytestmark = pytest.mark.timeout(900)
needs_rg = pytest.mark.skipif(not installed("reasoning_gym"), reason="pip install 'lmgym[reasoning-gym]'")
needs_ta = pytest.mark.skipif(not installed("textarena"), reason="pip install 'lmgym[textarena]'")
needs_gem = pytest.mark.skipif(not installed("gem"), reason="pip install 'lmgym[gem]'")

CASES = [
    pytest.param("lmgym/ReasoningGym-v0", {"task": "basic_arithmetic"}, marks=needs_rg, id="rg-arithmetic"),
    pytest.param("lmgym/ReasoningGym-v0", {"task": "spell_backward"}, marks=needs_rg, id="rg-string"),
    pytest.param("lmgym/ReasoningGym-v0", {"task": "aiw", "config": {"seed": 3}}, marks=needs_rg, id="rg-logic"),
    pytest.param("lmgym/TextArena-v0", {"game": "GuessTheNumber-v0"}, marks=needs_ta, id="ta-guess"),
    pytest.param("lmgym/TextArena-v0", {"game": "TicTacToe-v0", "opponent": "random"}, marks=needs_ta, id="ta-ttt"),
    pytest.param("lmgym/GEM-v0", {"env_id": "game:GuessTheNumber-v0-easy"}, marks=needs_gem, id="gem-guess"),
    pytest.param("lmgym/GEM-v0", {"env_id": "game:Mastermind-v0-easy"}, marks=needs_gem, id="gem-mastermind"),
]


def encode(env, text):
    return np.array(env.get_wrapper_attr("tokenizer").encode(text), dtype=np.int64)


def play(env, seed, policy):
    obs, _ = env.reset(seed=seed)
    trace, done = [obs], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(encode(env, policy(env, obs))[:48])
        trace.append((obs, reward, terminated, truncated, info.get("correct")))
        done = terminated or truncated
    return trace


def legal_or_boxed(env, obs):
    """A scripted move for any of the cases: the oracle where there is one, else a legal move."""
    from lmgym.compat.textarena import random_legal_move

    try:
        return env.get_wrapper_attr("oracle")()
    except NotImplementedError:
        import random

        return random_legal_move(obs, random.Random(0)) or "\\boxed{1 2 3 4}"


@pytest.mark.parametrize("env_id, kwargs", CASES)
def test_check_env_and_determinism(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    first, again = play(env, 7, legal_or_boxed), play(gym.make(env_id, **kwargs), 7, legal_or_boxed)
    assert first == again
    assert len({str(play(env, seed, legal_or_boxed)) for seed in range(7, 11)}) > 1  # seeds give other instances


@pytest.mark.parametrize("env_id, kwargs", CASES)
def test_async_vector_round_trip(env_id, kwargs):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="async", **kwargs)
    try:
        obs, _ = envs.reset(seed=[3, 4])
        single = gym.make(env_id, **kwargs)
        assert obs[0] == single.reset(seed=3)[0]
        tokenizer = envs.get_attr("tokenizer")[0]
        action = np.array(tokenizer.encode("[1] \\boxed{1} <answer>1</answer>")[:48], dtype=np.int64)
        obs, rewards, *_ = envs.step((action, action))
        assert all(isinstance(o, str) for o in obs) and np.isfinite(rewards).all()
    finally:
        envs.close()


@pytest.mark.parametrize(
    "env_id, kwargs",
    [c for c in CASES if c.id in ("rg-arithmetic", "rg-string", "rg-logic", "ta-guess", "gem-guess")],
)
def test_the_oracle_reaches_reward_1(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    for seed in range(10):
        trace = play(env, seed, lambda e, obs: e.get_wrapper_attr("oracle")())
        assert trace[-1][1] == 1.0 and trace[-1][4] is True, trace[-1]


@needs_rg
def test_reasoning_gym_partial_credit_retry_and_held_out_instances():
    env = gym.make("lmgym/ReasoningGym-v0", task="chain_sum")
    env.reset(seed=0)
    answer = env.get_wrapper_attr("oracle")()[len("<answer>") : -len("</answer>")]
    _, reward, terminated, _, info = env.step(encode(env, f"<answer>{answer} xx</answer>"))
    assert 0 < reward < 1 and terminated and info["correct"] is False  # reasoning-gym's partial credit
    env.reset(seed=0)
    obs, reward, terminated, _, _ = env.step(encode(env, "Let me think about this sum for a while first"))
    assert (reward, terminated) == (0.0, False) and "<answer></answer>" in obs  # one retry, with feedback
    assert env.step(encode(env, "I am still thinking it over, step by step"))[1:3] == (0.0, True)


@needs_rg
def test_reasoning_gym_reads_answers_as_chat_models_write_them():
    env = gym.make("lmgym/ReasoningGym-v0", task="syllogism", partial_credit=False)
    env.reset(seed=0)
    right = env.get_wrapper_attr("oracle")()[len("<answer>") : -len("</answer>")]
    wrong = {"Yes": "No", "No": "Yes"}[right]
    for reply, correct in [
        (f"<answer> {right}. </answer>", True),  # whitespace and a trailing period
        (f"{right}.", True),  # a bare answer, no tags
        (f"So the answer is <answer>{right}", True),  # the turn ended before the closing tag
        (f"<answer>{right} {wrong}</answer>", False),  # both answers: the library's scorer says no
        (f"<answer>{wrong}.</answer>", False),
    ]:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(encode(env, reply))
        assert (reward, info["correct"], terminated) == (float(correct), correct, True), reply
    prompts = {env.reset(seed=s)[0] for s in [0, 1, 2, 2**30, 2**30 + 1]}
    assert len(prompts) == 5  # every seed its own instance, held-out seeds included
    finite = gym.make("lmgym/ReasoningGym-v0", task="spell_backward", config={"size": 2, "seed": 5})
    assert finite.reset(seed=0)[0] == finite.reset(seed=2)[0] != finite.reset(seed=1)[0]


@needs_rg
def test_reasoning_gym_bad_task_and_config_are_one_line():
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'chain_sums'; did you mean chain_sum"):
        gym.make("lmgym/ReasoningGym-v0", task="chain_sums")
    with pytest.raises(ValueError, match="refuses config"):
        gym.make("lmgym/ReasoningGym-v0", task="chain_sum", config={"no_such_field": 1})


@needs_ta
def test_textarena_routes_turns_and_returns_the_reward_at_the_end():
    seen = []

    def opponent(view):
        seen.append(view)
        from lmgym.compat.textarena import random_legal_move

        return random_legal_move(view, __import__("random").Random(len(seen)))

    env = gym.make("lmgym/TextArena-v0", game="TicTacToe-v0", opponent=opponent)
    trace = play(env, 0, legal_or_boxed)
    assert seen and "Tic Tac Toe" in seen[0] and "Available Moves" in seen[-1]
    rewards = [step[1] for step in trace[1:]]
    assert all(r == 0 for r in rewards[:-1]) and rewards[-1] in (-1.0, 0.0, 1.0)
    assert "[Player 1]" in "".join(step[0] for step in trace[1:])  # the model sees the opponent's moves


@needs_ta
def test_textarena_errors_name_the_game():
    with pytest.raises(ValueError, match="two-player game: pass opponent="):
        gym.make("lmgym/TextArena-v0", game="TicTacToe-v0")
    with pytest.raises(ValueError, match="unknown TextArena game 'TicTacToe-v9'"):
        gym.make("lmgym/TextArena-v0", game="TicTacToe-v9")
    with pytest.raises(LibraryError, match="Wordle-v0' needs the nltk resource 'words'"):
        gym.make("lmgym/TextArena-v0", game="Wordle-v0").reset(seed=0)

    env = gym.make("lmgym/TextArena-v0", game="GuessTheNumber-v0")
    env.reset(seed=0)
    env.unwrapped.ta.step = lambda action: 1 / 0
    with pytest.raises(LibraryError, match=r"'GuessTheNumber-v0' raised ZeroDivisionError on the action '\[5\]'"):
        env.step(encode(env, "[5]"))


@needs_ta
def test_textarena_opponent_from_a_saved_model(tmp_path):
    model = tiny_model(258, 256, n_layer=1, n_embd=32, n_positions=1024)
    model.save_pretrained(tmp_path / "opponent")
    ByteTokenizer().save_pretrained(tmp_path / "opponent")
    env = gym.make("lmgym/TextArena-v0", game="TicTacToe-v0", opponent=str(tmp_path / "opponent"))
    env.reset(seed=0)
    obs, reward, *_ = env.step(encode(env, "[4]"))
    assert "[Player 1]" in obs and np.isfinite(reward)  # the model moved (an invalid move is a move too)


@needs_gem
def test_gem_errors_name_the_env(monkeypatch):
    from lmgym.compat import gem

    for name in ("huggingface_hub.constants", "datasets.config"):  # offline at once, not after the Hub's retries
        if importlib.util.find_spec(name.partition(".")[0]):
            monkeypatch.setattr(importlib.import_module(name), "HF_HUB_OFFLINE", True)

    assert gem.make("game:GuessTheNumber-v0-easy").unwrapped.env_id == "game:GuessTheNumber-v0-easy"
    with pytest.raises(ValueError, match="unknown GEM env 'game:GuessTheNumber-v0-eas'; did you mean"):
        gem.make("game:GuessTheNumber-v0-eas")
    with pytest.raises(LibraryError, match="needs the network, to download its dataset"):
        gem.make("qa:HotpotQA")
    with pytest.raises(LibraryError, match="grades answers with sympy's parse_expr"):  # refused before it downloads
        gem.make("math:Math12K")


def lmgym(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "lmgym.cli", *args],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, **(env or {})},
    )


def test_list_shows_each_adapter_once():
    out = lmgym("list").stdout
    for env_id in ("lmgym/ReasoningGym-v0", "lmgym/TextArena-v0", "lmgym/GEM-v0"):
        assert out.count(env_id) == 1


@needs_rg
def test_list_tasks_of_a_library():
    names = lmgym("list", "--tasks", "reasoning-gym").stdout.split()
    assert {"chain_sum", "spell_backward", "aiw"} <= set(names) and len(names) > 100


@needs_rg
@pytest.mark.slow
def test_train_two_updates_on_a_reasoning_gym_task(tmp_path):
    result = lmgym(
        "train",
        "lmgym/ReasoningGym-v0",
        "--env-arg",
        "task=basic_arithmetic",
        "--env-arg",
        "config={'max_terms': 2}",
        "--episodes",
        "16",
        "--num-envs",
        "8",
        "--episodes-per-update",
        "8",
        "--eval-episodes",
        "8",
        "--eval-every",
        "0",
        "--warmstart-steps",
        "5",
        "--out",
        str(tmp_path / "run"),
        env={"LMGYM_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env"] == "lmgym/ReasoningGym-v0" and summary["episodes"] == 16


@needs_rg
def test_a_config_that_makes_the_library_recurse_is_a_library_error_at_make():
    with pytest.raises(LibraryError, match="basic_arithmetic.*raised RecursionError"):
        gym.make("lmgym/ReasoningGym-v0", task="basic_arithmetic", config={"min_terms": 10**6, "max_terms": 10**6})


@needs_rg
def test_partial_credit_can_be_switched_off():
    hedged = "<answer>Yes No</answer>"
    scores = {}
    for partial in (True, False):
        env = gym.make("lmgym/ReasoningGym-v0", task="syllogism", partial_credit=partial)
        rewards = []
        for seed in range(20):
            env.reset(seed=seed)
            rewards.append(env.step(encode(env, hedged))[1])
        scores[partial] = rewards
    assert np.mean(scores[True]) > 0.2 and set(scores[False]) == {0.0}  # "Yes No" earns only with partial credit
    env.reset(seed=0)
    assert env.step(encode(env, env.get_wrapper_attr("oracle")()))[1] == 1.0  # full credit still pays


@needs_ta
@pytest.mark.parametrize("bad", ["not-a-path", "tmp-dir"])
def test_a_textarena_model_opponent_that_is_no_model_fails_at_make(bad, tmp_path):
    path = str(tmp_path) if bad == "tmp-dir" else "not-a-path"
    with pytest.raises(ValueError, match=r"opponent .* (is neither 'random'|is not a model directory)"):
        gym.make("lmgym/TextArena-v0", game="TicTacToe-v0", opponent=path)


@needs_ta
def test_a_textarena_model_opponent_may_be_a_gguf_file(tmp_path):
    from lmgym.compat.textarena import ModelOpponent, as_opponent

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert isinstance(as_opponent(str(gguf)), ModelOpponent)  # checked as load_model would take it


@needs_gem
def test_gem_refuses_an_unknown_env_kwarg_naming_it():
    from lmgym.compat import gem

    with pytest.raises(ValueError, match="takes no env_kwargs 'bogus'; it takes: max_number, max_turns, min_number"):
        gem.make("game:GuessTheNumber-v0-easy", env_kwargs={"bogus": 1})
    assert gem.make("game:GuessTheNumber-v0-easy", env_kwargs={"max_turns": 3}).unwrapped.gem.max_turns == 3


@pytest.mark.parametrize(
    "env_id, kwargs, code",
    [
        pytest.param(
            "lmgym/TextArena-v0", {"game": "GuessTheNumber-v0"}, "print(sorted([3, 1, 2]))", marks=needs_ta, id="ta"
        ),
        pytest.param(
            "lmgym/GEM-v0", {"env_id": "game:GuessTheNumber-v0-easy"}, "print({1: 2})", marks=needs_gem, id="gem"
        ),
    ],
)
@pytest.mark.parametrize("chat", [False, True])
def test_a_python_call_goes_on_past_the_env_s_stop_strings(env_id, kwargs, code, chat, tmp_path):
    """TextArena's `]` and GEM's `}` ended the turn inside `<python>...`: --tools python could not be called."""
    from helpers import build_chat_model

    from lmgym.cli.options import with_tools
    from lmgym.wrappers import ChatTemplate

    tokenizer = str(build_chat_model("qwen2", tmp_path / "m")) if chat else None
    env = with_tools(gym.make(env_id, tokenizer=tokenizer, **kwargs), "python")
    env = ChatTemplate(env) if chat else env
    stops = env.get_wrapper_attr("stop_strings")
    call = f"<python>{code}</python>"
    ends = [i + len(s) for i in range(len(call)) for s in stops if call.startswith(s, i)]
    pieces = [call[a:b] for a, b in zip([0, *ends], ends)]  # where the engine ends each turn
    assert len(pieces) > 1 and "".join(pieces) == call
    env.reset(seed=0)
    for piece in pieces[:-1]:
        obs, reward, terminated, truncated, info = env.step(encode(env, piece))
        assert (obs, reward, terminated, truncated, info["continued"]) == ("", 0.0, False, False, True)
    obs, reward, terminated, _, info = env.step(encode(env, pieces[-1]))
    assert info["tool_output"] == ("[1, 2, 3]" if "sorted" in code else "{1: 2}") and not terminated
    assert "<result>" in obs
