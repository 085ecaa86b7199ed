"""A model's answer never runs as Python in the trainer: reasoning-gym's scorers that would eval
it read it as a literal or score it in the sandbox, GEM's graders that would are refused."""

import os

import gymnasium as gym
import pytest

from lmgym.compat import LibraryError, code_answers, installed

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not installed("reasoning_gym"), reason="pip install 'lmgym[reasoning-gym]'"),
]
CODE_TASKS = sorted(code_answers.LITERAL_TASKS | code_answers.SYMPY_TASKS)


def answer(env, text, seed=0):
    env.reset(seed=seed)
    tok = env.get_wrapper_attr("tokenizer")
    return env.step(tok.encode(f"<answer>{text}</answer>"))


def attacks(marker):
    touch = f"__import__('os').system('touch {marker}')"
    return [touch, f"[{touch}]", f"[[{touch}]]", f"x + {touch}"]


@pytest.mark.parametrize("task", CODE_TASKS)
def test_an_answer_that_is_code_does_not_run_and_the_oracle_still_scores(task, tmp_path):
    env = gym.make("lmgym/ReasoningGym-v0", task=task, max_action_tokens=512)
    marker = tmp_path / "ran"
    for text in attacks(marker):
        _, reward, terminated, _, info = answer(env, text)
        assert not marker.exists(), text
        assert terminated and reward <= 0.01 and not info["correct"]
    env.reset(seed=0)
    oracle = env.get_wrapper_attr("oracle")()
    _, reward, _, _, info = env.step(env.get_wrapper_attr("tokenizer").encode(oracle))
    assert reward == 1.0 and info["correct"] and "refused" not in info


def test_an_answer_cannot_read_the_solution_out_of_memory():
    """On n_queens an answer that walked gc.get_objects() found the valid boards (0.5 credit)."""
    env = gym.make("lmgym/ReasoningGym-v0", task="n_queens", max_action_tokens=512)
    walk = "[o for o in __import__('gc').get_objects() if isinstance(o, dict) and 'valid_answers' in o][0]"
    steal = f"{walk}['valid_answers'][0]"
    assert answer(env, steal)[1] == 0.0


def test_a_power_tower_is_refused_at_once():
    """`9**9**9**9` made sympy compute while holding the GIL, past every thread deadline."""
    env = gym.make("lmgym/ReasoningGym-v0", task="countdown")
    _, reward, _, _, info = answer(env, "9**9**9**9")
    assert reward == 0.01  # countdown's score of no answer
    assert "an exponent that is a power" in info["refused"]


def test_a_scoring_past_its_time_is_killed_and_scores_the_floor(monkeypatch):
    monkeypatch.setattr(code_answers, "SCORE_TIMEOUT", 0.2)  # less than the sandbox's imports take
    env = gym.make("lmgym/ReasoningGym-v0", task="countdown")
    env.reset(seed=0)
    _, reward, _, _, info = answer(env, env.unwrapped.entry["answer"])
    assert reward == 0.01 and "timed out" in info["refused"]


def test_an_answer_the_scorer_raises_on_earns_nothing_and_fails_nothing():
    """prime_factorization's scorer raised ValueError on `2 x 3`: the step failed on model text."""
    env = gym.make("lmgym/ReasoningGym-v0", task="prime_factorization")
    _, reward, terminated, _, info = answer(env, "2 x 3 or so")
    assert terminated and reward == 0.0 and "ValueError" in info["refused"]


def test_no_reasoning_gym_task_runs_an_answer(tmp_path):
    """Every task reasoning-gym has, against answers that are code: the nine known ones and any a
    later release adds."""
    from reasoning_gym.factory import DATASETS

    from lmgym.compat.reasoning_gym import ReasoningGymEnv

    marker, ran = tmp_path / "ran", []
    for task in sorted(DATASETS):
        try:
            env = ReasoningGymEnv(task, max_action_tokens=512)
        except (ValueError, LibraryError):  # a task that needs a config or a download
            continue
        for text in attacks(marker)[:2]:
            answer(env, text)
            if marker.exists():
                ran.append(task)
                os.remove(marker)
    assert ran == []


@pytest.mark.skipif(not installed("gem"), reason="pip install 'lmgym[gem]'")
def test_gem_scores_reasoning_gym_safely_and_refuses_graders_that_run_answers(tmp_path):
    marker = tmp_path / "ran"
    for task in ("countdown", "n_queens"):
        env = gym.make("lmgym/GEM-v0", env_id=f"rg:{task}", max_action_tokens=512)
        env.reset(seed=0)
        tok = env.get_wrapper_attr("tokenizer")
        _, reward, *_ = env.step(tok.encode("\\boxed{" + attacks(marker)[0] + "}"))
        assert not marker.exists() and reward <= 0.01
    with pytest.raises(LibraryError, match="parse_expr, which runs the model's text as Python"):
        gym.make("lmgym/GEM-v0", env_id="math:GSM8K")
