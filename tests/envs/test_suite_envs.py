"""The env suite: user tasks, pipelines, tools as a wrapper, games."""

import gymnasium as gym
import numpy as np
import pytest

import lmgym
from lmgym.core import LMEnv
from lmgym.envs.wordle import feedback, word_list
from lmgym.wrappers import ToolUse


def step_text(env, text):
    return env.step(np.array(env.get_wrapper_attr("tokenizer").encode(text), dtype=np.int64))


def play_oracle(env, seed):
    env.reset(seed=seed)
    total, turns, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, _ = step_text(env, env.get_wrapper_attr("oracle")())
        total, turns, done = total + reward, turns + 1, terminated or truncated
    return total, turns, terminated


@pytest.mark.parametrize(
    "env_id, max_turns",
    [
        ("lmgym/GuessNumber-v0", 7),
        ("lmgym/Maze-v0", 40),
        ("lmgym/Wordle-v0", 6),
        ("lmgym/Countdown-v0", 1),
        ("lmgym/PythonTool-v0", 2),
    ],
)
def test_oracles_solve_100_episodes_within_limits(env_id, max_turns):
    env = gym.make(env_id)
    for seed in range(100 if env_id != "lmgym/PythonTool-v0" else 20):
        total, turns, terminated = play_oracle(env, seed)
        assert terminated and total > 0 and turns <= max_turns, (seed, total, turns)


def test_prompt_env_with_list_and_generator_and_function():
    seen = []

    def reward_fn(prompt, completion, info):
        seen.append((prompt, completion, info))
        return float(completion == info["answer"])

    tasks = [{"prompt": "2+2=", "answer": "4"}, {"prompt": "3+3=", "answer": "6"}]
    env = gym.make("lmgym/Prompt-v0", prompts=tasks, reward_fn=reward_fn)
    prompt, info = env.reset(seed=0)
    answer = {"2+2=": "4", "3+3=": "6"}[prompt]
    assert info == {"answer": answer}
    assert step_text(env, answer)[1:3] == (1.0, True)
    assert seen[-1] == (prompt, answer, {"answer": answer})
    assert env.reset(seed=0)[0] == prompt  # a list is indexed by the seeded RNG

    gen = gym.make("lmgym/Prompt-v0", prompts=(f"task {i}" for i in range(3)), reward_fn=lambda p, c, i: len(c))
    assert [gen.reset()[0] for _ in range(3)] == ["task 0", "task 1", "task 2"]
    with pytest.raises(RuntimeError, match="exhausted"):
        gen.reset()

    made = gym.make(
        "lmgym/Prompt-v0", prompts=lambda rng: f"number {int(rng.integers(1000))}", reward_fn=lambda p, c, i: 0.5
    )
    assert made.reset(seed=5)[0] == made.reset(seed=5)[0] and made.reset(seed=5)[0].startswith("number ")
    assert step_text(made, "x")[1] == 0.5


def test_raising_reward_function_names_prompt_and_completion():
    def broken(prompt, completion, info):
        raise KeyError("score")

    env = gym.make("lmgym/Prompt-v0", prompts=["Say hi."], reward_fn=broken)
    env.reset(seed=0)
    with pytest.raises(
        RuntimeError, match=r"(?s)reward_fn raised KeyError.*prompt: 'Say hi\.'.*completion: 'oops'"
    ) as err:
        step_text(env, "oops")
    assert isinstance(err.value.__cause__, KeyError)


def test_prompt_env_with_a_dataset():
    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"question": ["1+1=", "2+3="], "answer": ["2", "5"]})
    env = gym.make(
        "lmgym/Prompt-v0", prompts=data, prompt_key="question", reward_fn=lambda p, c, info: float(c == info["answer"])
    )
    prompt, info = env.reset(seed=1)
    assert prompt in ("1+1=", "2+3=") and info["answer"] == {"1+1=": "2", "2+3=": "5"}[prompt]
    assert step_text(env, info["answer"])[1] == 1.0


def test_pipeline_calls_transforms_and_reward_in_order():
    calls = []

    def f1(out):
        calls.append(("F1", out))
        return f" then [{out}]->"

    def f2(out):
        calls.append(("F2", out))
        return " last:"

    def reward(prompt, outputs, info):
        calls.append(("R", prompt, outputs, info))
        return 0.25

    env = gym.make("lmgym/Pipeline-v0", prompts=[{"prompt": "start:", "tag": 7}], transforms=[f1, f2], reward_fn=reward)
    env.reset(seed=0)
    assert step_text(env, "a")[:3] == (" then [a]->", 0.0, False)
    assert step_text(env, "b")[:3] == (" last:", 0.0, False)
    assert step_text(env, "c")[1:3] == (0.25, True)
    assert calls == [("F1", "a"), ("F2", "b"), ("R", "start:", ["a", "b", "c"], {"tag": 7})]


class Plain(LMEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seen = []
        return "go", {}

    def step_text(self, text):
        self.seen.append(text)
        return f"inner saw {text!r}", 1.0, False, False, {}


def test_tool_use_answers_tool_turns_and_passes_others():
    inner = Plain()
    env = ToolUse(inner, {"calc": lmgym.tools.Calculator(), "upper": str.upper})
    env.reset(seed=0)
    assert step_text(env, "<calc>2*21</calc>")[:2] == ("<result>42</result>", 0.0)
    assert step_text(env, "say <upper>hi</upper>")[0] == "<result>HI</result>"
    assert step_text(env, "<calc>2*21")[0] == "<result>error: <calc> is not closed with </calc></result>"
    assert step_text(env, "<calc>os</calc>")[0] == "<result>error: names are not allowed: os</result>"
    assert inner.seen == []  # no tool turn reached the inner env
    assert step_text(env, "plain text")[:2] == ("inner saw 'plain text'", 1.0)
    assert inner.seen == ["plain text"]
    assert env.get_wrapper_attr("stop_strings") == ("</calc>", "</upper>")
    assert "<result>" in env.get_wrapper_attr("special_tokens")
    assert "<calc>2*21</calc><result>42</result>" in inner.render()
    with pytest.raises(ValueError, match="tag name"):
        ToolUse(Plain(), {"bad name": str})


def test_calculator_is_tool_use_and_its_oracle_calls_the_tool():
    env = gym.make("lmgym/Calculator-v0", operators="*")
    chain, layer = [], env
    while isinstance(layer, gym.Wrapper):
        chain.append(type(layer).__name__)
        layer = layer.env
    assert "ToolUse" in chain and type(env.unwrapped).__name__ == "ArithmeticEnv"
    env.reset(seed=0)
    call = env.get_wrapper_attr("oracle")()
    assert call.startswith("<calc>")
    obs = step_text(env, call)[0]
    assert obs.startswith("<result>") and env.get_wrapper_attr("oracle")() == f"<answer>{obs[8:-9]}</answer>"


def test_wordle_feedback_rules():
    assert feedback("crane", "crane") == "GGGGG"
    assert feedback("speed", "abide") == "..Y.Y"
    assert feedback("eerie", "there") == "Y.Y.G"
    assert len(word_list()) > 400 and all(len(w) == 5 for w in word_list())


def test_countdown_checks_numbers_and_value():
    env = gym.make("lmgym/Countdown-v0")
    _, info = env.reset(seed=3)
    numbers, target = info["numbers"], info["target"]
    assert step_text(env, env.get_wrapper_attr("oracle")())[1] == 1.0
    env.reset(seed=3)
    assert step_text(env, f"<answer>{target}</answer>")[1] == (1.0 if target in numbers else 0.0)
    env.reset(seed=3)
    assert (
        step_text(env, f"<answer>{numbers[0]} + {numbers[0]} + {numbers[0]} + {numbers[0]} + {numbers[0]}</answer>")[1]
        == 0.0
    )


def test_chat_template(hf_tokenizer_dir):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(hf_tokenizer_dir)
    hf.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    hf.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    env = lmgym.wrappers.ChatTemplate(gym.make("lmgym/Calculator-v0", tokenizer=hf, operators="*"), system="Be exact.")
    obs, _ = env.reset(seed=0)
    question = gym.make("lmgym/Calculator-v0", operators="*").reset(seed=0)[0]
    assert obs == (
        f"<|im_start|>system\nBe exact.<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert env.end_of_turn == "<|im_end|>" and "<|im_end|>" in env.stop_strings and "</calc>" in env.stop_strings
    call = env.get_wrapper_attr("oracle")()
    action = hf.encode(call, add_special_tokens=False) + [hf.convert_tokens_to_ids("<|im_end|>")]
    obs, reward, terminated, _, _ = env.step(np.array(action))
    result = obs.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
    assert obs == f"\n<|im_start|>user\n{result}<|im_end|>\n<|im_start|>assistant\n"
    assert result.startswith("<result>") and not terminated
