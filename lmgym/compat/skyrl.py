"""SkyRL-v0: skyrl-gym's envs, or your own ``BaseTextEnv``, as lmgym envs (``pip install 'lmgym[skyrl]'``).

A SkyRL env plays one task (a dataset row): ``init(prompt)`` gives the first messages, and each
``step(text)`` returns ``{observations, reward, done, metadata}``. The adapter draws a row with
the env's RNG at each reset, makes the env for it, and hands each turn's reward to the turn that
earned it (SkyRL's per-turn rewards: ``gsm8k_multi_turn``'s format credit, a tool turn's).

Model-written SQL (``text2sql``) runs in SkyRL's own tool, in this process: in a transaction
that is rolled back, interrupted after 5 s; not in lmgym's sandbox.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmgym.compat import require
from lmgym.compat.library import LibraryEnv

DEFAULT_TASKS = [
    {
        "prompt": f"{question} Give the answer at the end as '#### N'.",
        "reward_spec": {"ground_truth": answer},
        "extra_info": {"max_turns": 3},
    }
    for question, answer in [
        ("Tom has 3 apples and buys 4 more. How many apples does he have?", "7"),
        ("A box holds 6 eggs. How many eggs are in 3 boxes?", "18"),
        ("Sara had 20 stickers and gave away 8. How many are left?", "12"),
        ("A bus carries 9 people on each trip. How many people ride in 5 trips?", "45"),
        ("Ali reads 7 pages a day. How many pages does he read in a week?", "49"),
        ("There are 15 birds and 6 fly away. How many birds remain?", "9"),
        ("A pen costs 3 dollars. How much do 8 pens cost?", "24"),
        ("Mia has 2 bags with 11 marbles each. How many marbles does she have?", "22"),
    ]
]
"""Eight word problems for ``gsm8k_multi_turn``: the env plays offline with no dataset."""

ORACLES: dict[str, Callable[[dict[str, Any]], str]] = {
    "gsm8k": lambda row: f"#### {row['reward_spec']['ground_truth']}",
    "gsm8k_multi_turn": lambda row: f"#### {row['reward_spec']['ground_truth']}",
    "text2sql": lambda row: f"<think>The query.</think>\n<solution>{row['reward_spec']['ground_truth']}</solution>",
}
"""The answer each shipped env scores full marks, written from a row's ``reward_spec``."""


def load_tasks(tasks: Any) -> Any:
    """``tasks`` as rows: a path to a ``.jsonl``, ``.json`` or ``.parquet`` file is read; a list,
    a dataset or a function of the RNG is used as it is (``lmgym.envs.prompt.TaskSource``)."""
    if not isinstance(tasks, (str, Path)):
        return tasks
    path = Path(tasks)
    if not path.is_file():
        raise ValueError(f"tasks {str(path)!r} is not a file (a .jsonl, .json or .parquet of rows)")
    if path.suffix == ".parquet":
        return require("pandas", "skyrl").read_parquet(path).to_dict("records")
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines() if line]


def env_factory(env: Any) -> tuple[str, Callable[..., Any]]:
    """``(name, make(env_config, extras))`` for a skyrl-gym registry id, ``"module:Class"`` or a class."""
    if isinstance(env, str) and ":" not in env:
        skyrl = require("skyrl_gym", "skyrl")
        if env not in skyrl.registry:
            from lmgym.compat import check_name

            check_name("skyrl-gym env", env, sorted(skyrl.registry), "skyrl")
        return env, lambda config, extras: skyrl.make(env, env_config=config, extras=extras)
    if isinstance(env, str):
        module, _, name = env.partition(":")
        env = getattr(importlib.import_module(module), name)
    if not callable(env):
        raise ValueError(f"env must be a skyrl-gym id, 'module:Class' or a BaseTextEnv subclass, got {env!r:.80}")
    return getattr(env, "__name__", str(env)), lambda config, extras: env(env_config=config, extras=extras)


def as_text(messages: Any) -> str:
    """A turn's messages as the model reads them (``LibraryEnv.render_messages``), ending a line.

    Example:
        >>> as_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
        'Be brief.\\n\\n2+2?\\n'
    """
    text = LibraryEnv.render_messages(messages)
    return text if not text or text.endswith("\n") else text + "\n"


class SkyRLEnv(LibraryEnv):
    """A skyrl-gym env (``text2sql``, ``gsm8k_multi_turn``, ...) or your own ``BaseTextEnv``.

    ## Description
    Each reset draws a task row with the env's RNG, makes ``env`` for it (``env_config``, the
    row's other fields as its ``extras``) and calls its ``init`` on the row's ``prompt``.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=256)``: the model's message of the turn.

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the messages' contents (system, then user; after
    a step, what the env answers: a tool's output, the next question).

    ## Starting State
    The task the seed draws.

    ## Rewards
    The SkyRL env's reward of each step, on that step.

    ## Episode End
    When the SkyRL env says ``done``: ``truncated`` where it has used its ``max_turns`` without
    a reward of 1 on the last, else ``terminated``; truncated by the registered limit of 64 turns
    too. ``info["correct"]``: a reward of 1 or more.

    ## Arguments
    ``gym.make("lmgym/SkyRL-v0", env="gsm8k_multi_turn", tasks=None, env_config=None,
    oracle=None, tokenizer=None)``. ``env``: a skyrl-gym id, ``"module:Class"`` or a class;
    ``tasks``: rows (``prompt``: a string or messages; ``reward_spec``, ``extra_info``,
    ``db_id``...), a dataset, a function of the RNG, or a ``.jsonl``/``.json``/``.parquet`` file
    (default: eight word problems); ``env_config``: a dict (an OmegaConf config for the env);
    ``oracle``: ``row -> str`` (default: the shipped envs' answer format, or a row's ``oracle``).

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 256
    max_observation_length = 16384

    def __init__(
        self,
        env: Any = "gsm8k_multi_turn",
        tasks: Any = None,
        env_config: dict[str, Any] | None = None,
        oracle: Callable[[dict[str, Any]], str] | None = None,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        self.name, self.make_env = env_factory(env)
        self.tasks = load_tasks(DEFAULT_TASKS if tasks is None else tasks)
        if not callable(self.tasks) and not len(self.tasks):
            raise ValueError("tasks is empty")
        self.config = require("omegaconf", "skyrl").OmegaConf.create(dict(env_config or {}))
        self.oracle_fn = oracle or ORACLES.get(self.name)
        self.what = f"skyrl-gym env {self.name!r}"
        self.inner: Any = None
        self.row: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.library_seed()
        self.row = self.draw()
        fields = {k: v for k, v in self.row.items() if k != "prompt"}
        messages = self.row["prompt"]
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        with self.call("reset"):
            self.close_inner()
            self.inner = self.make_env(self.config, dict(fields))
            first, _ = self.inner.init(messages)
        return as_text(first), {"task": self.plain_info(fields)}

    def draw(self) -> dict[str, Any]:
        """A task row: ``tasks(rng)``, or the row the env's RNG indexes."""
        tasks = self.tasks
        row = tasks(self.np_random) if callable(tasks) else tasks[int(self.np_random.integers(len(tasks)))]
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), (str, list)):
            raise ValueError(f"a SkyRL task is a dict whose 'prompt' is a string or messages, got {row!r:.100}")
        return dict(row)

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self.call(action=text):
            out = self.inner.step(text)
        reward, done = float(out.get("reward") or 0.0), bool(out.get("done"))
        used = getattr(self.inner, "turns", 0) >= getattr(self.inner, "max_turns", float("inf"))
        at_limit = done and used and reward < 1.0  # out of turns, not solved on the last one
        info = {"correct": reward >= 1.0}
        metadata = out.get("metadata") or {}
        info.update(self.plain_info(metadata))
        return as_text(out.get("observations")), reward, done and not at_limit, at_limit, info

    def oracle(self) -> str:
        if "oracle" in self.row:
            return str(self.row["oracle"])
        if self.oracle_fn is None:
            raise NotImplementedError(f"{self.what} has no oracle: pass oracle=fn(row) -> str")
        return self.oracle_fn(self.row)

    def close_inner(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.inner = None

    def close(self) -> None:
        with self.call("close", rng=False):
            self.close_inner()
        super().close()


__all__ = ["SkyRLEnv"]
