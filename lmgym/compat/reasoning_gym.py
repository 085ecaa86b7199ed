"""ReasoningGym-v0: any reasoning-gym task as an lmgym env (``pip install 'lmgym[reasoning-gym]'``)."""

from __future__ import annotations

import re
from typing import Any

from lmgym.compat import LibraryError, check_name, code_answers, named_errors, require
from lmgym.compat.library import LibraryEnv

ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
BARE = re.compile(r"[^\n<>]{1,40}")  # a reply that is nothing but a short answer ("No.", "42")
BOXED = re.compile(r"\\boxed\{([^{}\n]*)\}")
SAID = re.compile(r"\b(?:final answer|answer)\b[*\s]{0,3}(?:is\b\s*:?|:|=)", re.IGNORECASE)
TRAILING_EQUALS = re.compile(r"=\s*([^=\n]+)$")
ANSWER_FORMATS = ("auto", "tags", "final")
EXAMPLE_INDEX = 2**31 - 1
"""The instance a worked example is drawn from (``example=True``): no training seed (below 2**30)
or held-out seed (from 2**30) reaches it."""


def extract_answer(text: str) -> str | None:
    """The answer in a reply: inside ``<answer>...</answer>`` (or after an ``<answer>`` the turn
    cut before its closing tag), or the whole reply when it is a bare short answer; stripped of
    whitespace. ``None`` when there is none.

    Example:
        >>> extract_answer("I think <answer> 42 </answer>"), extract_answer("No."), extract_answer("Well, it is 4")
        ('42', 'No.', 'Well, it is 4')
        >>> extract_answer("The sum of the three numbers, each of them odd, is 42"), extract_answer("<answer>")
        (None, None)
    """
    found = ANSWER.search(text)
    answer = found.group(1) if found else text if BARE.fullmatch(text.strip()) else ""
    return answer.strip() or None


def final_answer(text: str) -> str | None:
    """The final answer of a reply, as chat models write one around it: the last of an
    ``<answer>`` tag, a ``\\boxed{...}`` and a statement ``the answer is X`` / ``Answer: X`` (to
    the end of its line); else a trailing ``= X`` of the last line (``5 + 8 = 13``); else the whole
    reply when it is a bare short answer. Markdown emphasis is dropped. One answer only: a reply
    that lists candidates hands the scorer its last statement, never each of them.

    Example:
        >>> final_answer("5 + 8 = 13"), final_answer("The answer is **13**."), final_answer("\\\\boxed{7} or 8")
        ('13', '13.', '7')
        >>> final_answer("Answer: 4. No wait, the final answer is: 5")
        '5'
        >>> final_answer("We add them all up, then carry the one to the next column")
    """
    said = [(m.start(), text[m.end() :].split("\n", 1)[0]) for m in SAID.finditer(text)]
    tagged = [(m.start(), m.group(1)) for pattern in (ANSWER, BOXED) for m in pattern.finditer(text)]
    if said or tagged:
        answer = max(said + tagged)[1]
    else:
        lines = text.strip().splitlines()
        equals = TRAILING_EQUALS.search(lines[-1]) if lines else None
        answer = equals.group(1) if equals else text if BARE.fullmatch(text.strip()) else ""
    return answer.replace("**", "").strip().strip("_").strip() or None


def reading(answer_format: str, tokenizer: Any) -> str:
    """``answer_format`` as the env reads it: ``"auto"`` is ``"final"`` for a chat model (its
    tokenizer has a chat template), which writes its answer in prose, and ``"tags"`` otherwise.

    Example:
        >>> from lmgym.tokenizers import ByteTokenizer
        >>> reading("auto", ByteTokenizer()), reading("tags", ByteTokenizer())
        ('tags', 'tags')
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    if answer_format != "auto":
        return answer_format
    return "final" if getattr(getattr(tokenizer, "hf", None), "chat_template", None) else "tags"


class ReasoningGymEnv(LibraryEnv):
    """A reasoning-gym task: one question per episode, scored by reasoning-gym itself.

    ## Description
    ``reset(seed=s)`` makes the instance ``reasoning_gym.create_dataset(task, **config,
    seed=config_seed + s, size=1)[0]``, so a seed always gives the same instance and held-out
    seeds give unseen ones. With a ``size`` in ``config`` the task is that finite dataset
    instead (made once, seeded by ``config["seed"]``), and ``s`` takes its item ``s % size``.
    The model answers inside ``<answer>...</answer>`` (the stop string); an ``<answer>`` whose
    turn ended before its closing tag counts, and so does a reply that is nothing but a short
    bare answer (``No.``), as chat models write them (``extract_answer``). With
    ``answer_format="final"`` the answer is the reply's final one however a chat model wrote it
    (the last ``<answer>``, ``\\boxed{}``, ``the answer is X``, a trailing ``= X``:
    ``final_answer``). ``"auto"`` (the default) reads ``"final"`` for a chat model (a tokenizer
    with a chat template: zero-shot SmolLM2-135M-Instruct scored 0% reading tags on ``chain_sum``,
    23% reading its final answer) and ``"tags"`` otherwise. With ``example=True`` the prompt
    starts with one worked example of the task (an instance no training or held-out seed
    reaches), which shows the answer's format.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=64)``.

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the question and the answer format, then
    feedback after an answer without the tags.

    ## Starting State
    The instance of ``seed`` (see Description; ``config["seed"]`` defaults to 0).

    ## Rewards
    reasoning-gym's ``score_answer`` of the text inside the tags, partial credit kept (in
    ``[0, 1]``; an answer ending in a period is scored without it too, and the higher counts),
    or with ``partial_credit=False`` 1.0 for full credit and 0.0 otherwise;
    ``info["correct"]`` is full credit, ``info["score"]`` the library's score. Some tasks'
    scorers give partial credit to an answer that merely contains the reference (``syllogism``:
    ``Yes No`` earns 0.45 on average), which RL can learn to exploit: ``partial_credit=False``
    closes that (docs/results/task-libraries.md lists the tasks measured). No tags: 0.0 and feedback, up to
    ``max_attempts`` times, then the episode ends. The answer never runs as code: nine tasks'
    scorers would ``eval`` it, and there it is read as a literal, or checked and scored in the
    Python tool's sandbox (``lmgym.compat.code_answers``; ``info["refused"]`` says why an answer
    got the task's no-answer score instead).

    ## Episode End
    Terminated by an answer in the tags, or by the last unparseable attempt.

    ## Arguments
    ``gym.make("lmgym/ReasoningGym-v0", task="chain_sum", config={"min_terms": 2},
    max_attempts=1, partial_credit=True, example=False, answer_format="auto", tokenizer=None)``;
    ``lmgym list --tasks reasoning-gym`` names the tasks.

    ## Version History
    - v0: first version.
    """

    stop_strings = ("</answer>",)
    special_tokens = ("<answer>", "</answer>")
    max_action_tokens = 64
    max_observation_length = 16384

    def __init__(
        self,
        task: str = "chain_sum",
        config: dict[str, Any] | None = None,
        max_attempts: int = 1,
        partial_credit: bool = True,
        example: bool = False,
        answer_format: str = "auto",
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        names = list(require("reasoning_gym.factory", "reasoning-gym").DATASETS)
        check_name("reasoning-gym task", task, names, "reasoning-gym")
        if max_attempts < 0:
            raise ValueError(f"max_attempts must be >= 0, got {max_attempts}")
        self.example, self.answer_format = bool(example), reading(answer_format, self.tokenizer)
        self.task, self.max_attempts, self.partial_credit = task, int(max_attempts), bool(partial_credit)
        self.config = {"seed": 0, **(config or {})}
        self.finite = "size" in self.config  # else one instance per seed, made at reset
        self.dataset = self._dataset(self.config if self.finite else {**self.config, "size": 1})
        self.reseedable = not self.finite and self._reseedable()
        self.example_text = self._example() if self.example else ""
        self.entry: dict[str, Any] = {}
        self.attempts = 0
        self.refused: str | None = None  # why the last answer was not scored (code_answers)
        self.what = f"reasoning-gym task {task!r}"

    def _reseedable(self) -> bool:
        """Whether setting the dataset's ``seed`` gives the instance a new dataset of that seed
        would (most tasks draw each item from ``Random(seed + index)``): then one dataset serves
        every reset, instead of one made per reset (some tasks load files when made)."""
        base = int(self.config["seed"])
        for offset in (1, 2, 3):
            fresh = self._item(self._dataset({**self.config, "seed": base + offset, "size": 1}), 0)
            self.dataset.seed = base + offset
            mine = self._item(self.dataset, 0)
            if (mine["question"], mine["answer"]) != (fresh["question"], fresh["answer"]):
                self.dataset = self._dataset({**self.config, "size": 1})
                return False
        return True

    def _example(self) -> str:
        """One worked example of the task, an instance no training or held-out seed reaches:
        its question and its answer in the tags (what the prompt asks for)."""
        index = EXAMPLE_INDEX % len(self.dataset) if self.finite else 0
        source = self.dataset if self.finite else self._dataset({**self.config, "seed": EXAMPLE_INDEX, "size": 1})
        entry = self._item(source, index)
        question = str(entry["question"]).rstrip()
        return f"An example of this task, answered:\n{question}\n<answer>{entry['answer']}</answer>\n\nNow this one:\n"

    def _item(self, dataset: Any, index: int) -> dict[str, Any]:
        with named_errors(f"reasoning-gym task {self.task!r} (item {index}, config {self.config})"):
            return dataset[index]

    def _dataset(self, config: dict[str, Any]) -> Any:
        rg = require("reasoning_gym", "reasoning-gym")
        try:
            return rg.create_dataset(self.task, **config)
        except (TypeError, ValueError, AssertionError) as e:  # a bad config: the user's input
            raise ValueError(f"reasoning-gym task {self.task!r} refuses config {config}: {e}") from e
        except Exception as e:
            raise LibraryError(f"reasoning-gym task {self.task!r} with config {config} raised {e!r:.300}") from e

    def __getstate__(self) -> dict[str, Any]:  # the dataset is rebuilt on unpickling (AsyncVectorEnv)
        return {k: v for k, v in self.__dict__.items() if k != "dataset"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.dataset = self._dataset(self.config if self.finite else {**self.config, "size": 1})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.library_seed()  # the scorer's draws, if any, from the env's own stream
        index = seed if seed is not None else int(self.np_random.integers(2**30))
        if self.reseedable:
            self.dataset.seed = int(self.config["seed"]) + index
        elif not self.finite:
            self.dataset = self._dataset({**self.config, "seed": int(self.config["seed"]) + index, "size": 1})
        self.entry = self._item(self.dataset, index % len(self.dataset) if self.finite else 0)
        self.attempts = 0
        question = str(self.entry["question"]).rstrip()
        prompt = f"{self.example_text}{question}\nAnswer inside <answer></answer>.\n"
        return prompt, {"task": self.task, "index": index}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        answer = extract_answer(text) if self.answer_format == "tags" else final_answer(text)
        if answer is None:
            self.attempts += 1
            done = self.attempts > self.max_attempts
            feedback = "" if done else "\nNo answer found: write it inside <answer></answer>.\n"
            return feedback, 0.0, done, False, {"answer": None, "correct": False, "score": 0.0}
        score = self.score(answer)
        reward = score if self.partial_credit else float(score >= 1.0)
        info = {"answer": answer, "correct": score >= 1.0, "score": score}
        return "", reward, True, False, {**info, "refused": self.refused} if self.refused else info

    def score(self, answer: str) -> float:
        """reasoning-gym's score of ``answer``, or of it without a trailing period if that scores
        higher (chat models end a sentence with one: ``42.`` is ``42``), in [0, 1]. The text is never
        run as code (``lmgym.compat.code_answers.SafeScorer``). An answer refused there, or that the
        scorer raises on (``prime_factorization`` on ``2 x 3``), scores what no answer does, and
        ``self.refused`` says why: nothing a model writes fails the step."""
        candidates = list(dict.fromkeys([answer, answer.removesuffix(".").strip()]))
        scorer = code_answers.SafeScorer(self.task, self.dataset, self.config)
        try:
            with named_errors(f"reasoning-gym task {self.task!r} scoring", answer):
                scores = scorer.scores(candidates, self.entry)
            self.refused = scorer.refused and f"not scored: {scorer.refused}"
        except LibraryError as e:
            self.refused = f"the scorer raised {type(e.__cause__).__name__}: {str(e.__cause__)[:200]}"
            scores = [scorer.floor(self.entry)]
        return max(min(1.0, max(0.0, s)) if s == s else 0.0 for s in scores)  # NaN or out of range: its bug

    def oracle_tool_call(self) -> str | None:
        """A calculator call for a task whose instance is an arithmetic expression (its metadata's
        ``expression``: ``basic_arithmetic``, ``chain_sum``, ``products``, ...), so that under
        ``ToolUse`` with a calculator (``lmgym train --tools calc``) the oracle computes first. The
        expression is copied as the question writes it, spaces and all: a model learns to copy
        it, where one taught to drop the spaces also dropped and doubled minus signs."""
        from lmgym.tools.calculator import CalculatorError, evaluate

        expression = str(self.entry.get("metadata", {}).get("expression", "")).strip()  # as the question writes it
        try:
            evaluate(expression)
        except (CalculatorError, SyntaxError, ValueError, TypeError):
            return None
        return f"<calc>{expression}</calc>"

    def oracle(self) -> str:
        """The dataset's answer in the tags."""
        answer = self.entry.get("answer")
        if answer is None:
            raise NotImplementedError(f"reasoning-gym task {self.task!r} gives no reference answer")
        return f"<answer>{answer}</answer>"


__all__ = ["LibraryError", "ReasoningGymEnv"]
