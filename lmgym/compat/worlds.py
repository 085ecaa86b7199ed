"""The text worlds: TextWorld Express and ScienceWorld as lmgym envs, and what every text world
shares (``WorldEnv``): one command a turn, the reward of a step the change in the game's score,
``terminated`` on a win or a loss, ``truncated`` by the registered turn limit, the gold path as
the oracle. ``lmgym.compat.textworld`` holds TextWorld itself (its games are generated).

Both libraries run the game in a JVM (``pip install 'lmgym[textworld]'`` for TextWorld Express,
``'lmgym[scienceworld]'`` for ScienceWorld; Java 11 or later on the PATH, e.g. Debian's
``openjdk-17-jre-headless``): one per env, started when the env is made.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from typing import Any

from lmgym.compat import LibraryError, check_name, named_errors, require
from lmgym.compat.library import LibraryEnv

MAX_COMMAND_CHARS = 100
"""A command's length at most, unless a world sets its own (``WorldEnv.max_command_chars``):
TextWorld's interpreter (jericho's frotz, in this process) copies a command into a fixed buffer,
and a longer one (hundreds of bytes of U+FFFD) crashed the process."""
ART = re.compile(r"^[^A-Za-z0-9]*$")
NOT_ASCII = re.compile(r"[^\x20-\x7e]|\\")
"""Kept out of commands: what is not printable ASCII, and backslashes (jericho's frotz reads a
line that starts with one as a command to the interpreter itself, ``\\help``)."""


def first_line(text: str, limit: int = MAX_COMMAND_CHARS) -> str:
    """The command in a model's turn: its first line with printable ASCII in it, that ASCII only
    (the games' commands are ASCII, never a backslash), whitespace collapsed, at most ``limit``
    characters.

    Example:
        >>> first_line("  open   door\\nthen more"), first_line("\\ufffd\\ufffd\\ntake k\\u00e9y")
        ('open door', 'take ky')
        >>> first_line("\\\\x look")
        'x look'
    """
    for line in text.splitlines():
        command = " ".join(NOT_ASCII.sub("", line).split())
        if command:
            return command[:limit].strip()
    return ""


def clean(feedback: str) -> str:
    """A game's text without its ASCII-art banner lines (no letter or digit) and runs of blank lines.

    Example:
        >>> clean("$$ $$\\n\\n\\nYou are in a room.\\n")
        'You are in a room.'
    """
    lines = [line.rstrip() for line in feedback.splitlines()]
    text = "\n".join("" if line and ART.match(line) else line for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def require_java(what: str) -> None:
    if shutil.which("java") is None:
        raise LibraryError(f"{what} runs in a JVM and no java is on the PATH: apt install openjdk-17-jre-headless")


class WorldEnv(LibraryEnv):
    """A text world's turns (subclasses write ``begin``, ``play``, ``commands`` and ``gold``).

    The prompt is the task, then what the game says, then ``> ``; each turn the model writes one
    command (its first line counts; ``\\n`` ends the turn) and sees what the game answers. With
    ``admissible=True`` every observation lists the commands the game accepts there.
    ``info``: ``score``, ``max_score``, ``won``, ``lost``, ``command``; ``correct`` is ``won``.
    """

    max_command_chars = MAX_COMMAND_CHARS
    max_action_tokens = 128  # a command of max_command_chars bytes and its newline fit a byte tokenizer
    max_observation_length = 16384
    stop_strings: tuple[str, ...] = ("\n",)
    scale = 1.0
    """The reward of a step is the score's change divided by this."""
    max_score: float = 1.0

    def __init__(
        self,
        admissible: bool = False,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        self.admissible = bool(admissible)
        self.what = type(self).__name__
        self.score, self.won, self.lost = 0.0, False, False
        self.path: list[str] = []

    # ----------------------------------------------------------------- what a world writes
    def begin(self, seed: int) -> tuple[str, str, float]:
        """Starts the game ``seed`` picks: ``(task, what the game says first, score)``."""
        raise NotImplementedError

    def play(self, command: str) -> tuple[str, float, bool, bool]:
        """One command: ``(what the game says, score, won, lost)``."""
        raise NotImplementedError

    def commands(self) -> list[str]:
        """The commands the game accepts now."""
        raise NotImplementedError

    def gold(self) -> list[str]:
        """The gold path from the start (``oracle`` follows it while the episode does)."""
        raise NotImplementedError

    # --------------------------------------------------------------------- the contract
    def view(self, feedback: str) -> str:
        listing = f"\nCommands: {', '.join(self.commands())}" if self.admissible else ""
        return f"{clean(feedback)}{listing}\n> "

    def info(self, command: str | None = None) -> dict[str, Any]:
        info = {"score": self.score, "max_score": self.max_score, "won": self.won, "lost": self.lost}
        return {**info, "correct": self.won} if command is None else {**info, "command": command, "correct": self.won}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        with named_errors(self.what):
            task, feedback, score = self.begin(self.library_seed())
            said = task.strip() in feedback  # TextWorld's intro states the objective itself
            prompt = self.view(feedback) if said else f"{task.strip()}\n\n{self.view(feedback)}"
        self.score, self.won, self.lost, self.path = float(score), False, False, []
        return prompt, self.info()

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        command = first_line(text, self.max_command_chars)
        if not command:
            return "Write one command, e.g. look.\n> ", 0.0, False, False, self.info("")
        with named_errors(self.what, command):
            feedback, score, won, lost = self.play(command)
            reward = (float(score) - self.score) / self.scale
            self.score, self.won, self.lost = float(score), bool(won), bool(lost)
            self.path.append(command)
            done = self.won or self.lost
            return (clean(feedback) if done else self.view(feedback)), reward, done, False, self.info(command)

    def oracle(self) -> str:
        """The gold path's next command, while the episode has followed it (after a detour the
        path from the start may no longer apply: ``NotImplementedError``)."""
        with named_errors(self.what):
            path = self.gold()
        if path[: len(self.path)] != self.path or len(path) <= len(self.path):
            raise NotImplementedError(f"{self.what}: the episode left the gold path, which has no next command")
        return path[len(self.path)]


# ------------------------------------------------------------------------ TextWorld Express
class TextWorldExpressEnv(WorldEnv):
    """A TextWorld Express game (CookingWorld, Coin, MapReader, Sorting, ...).

    ## Description
    ``TextWorldExpressEnv`` of ``textworld_express`` runs ``game`` with ``game_params``; a reset
    picks a game of the ``split`` fold with a seed from the env's RNG.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=128)``: one command (its first line).

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the task and the game's text, then ``> ``.

    ## Starting State
    The fold's game the seed picks.

    ## Rewards
    The change in the game's score (0 to 1).

    ## Episode End
    Terminated on the task's success or failure; truncated by the registered limit of 50 turns.

    ## Arguments
    ``gym.make("lmgym/TextWorldExpress-v0", game="coin", game_params="numLocations=3",
    split="train", admissible=False, tokenizer=None)``; ``game_params`` as a string or a dict.

    ## Version History
    - v0: first version.
    """

    GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")

    def __init__(
        self,
        game: str = "coin",
        game_params: str | dict[str, Any] = "",
        split: str = "train",
        admissible: bool = False,
        **kwargs: Any,
    ):
        super().__init__(admissible, **kwargs)
        module = require("textworld_express", "textworld")
        check_name("TextWorld Express game", game, list(self.GAMES), "textworld")
        if split not in ("train", "dev", "test"):
            raise ValueError(f"split must be train, dev or test, got {split!r}")
        if isinstance(game_params, dict):
            game_params = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in game_params.items())
        self.game, self.game_params, self.split = game, str(game_params), split
        self.what = f"TextWorld Express game {game!r}"
        require_java(self.what)
        with named_errors(self.what):
            self.twx = module.TextWorldExpressEnv(envStepLimit=10**6)
            self.twx.load(gameName=game, gameParams=self.game_params)
        self.valid: list[str] = []

    def begin(self, seed: int) -> tuple[str, str, float]:
        obs, infos = self.twx.reset(seed=seed % 10**6, gameFold=self.split, generateGoldPath=True)
        self.valid = list(infos["validActions"])
        return str(infos["taskDescription"]), str(obs), float(infos["score"])

    def play(self, command: str) -> tuple[str, float, bool, bool]:
        obs, _, _, infos = self.twx.step(command)
        self.valid = list(infos["validActions"])
        return str(obs), float(infos["score"]), bool(infos["tasksuccess"]), bool(infos["taskfailure"])

    def commands(self) -> list[str]:
        return sorted(self.valid)

    def gold(self) -> list[str]:
        path = list(self.twx.getGoldActionSequence())
        return path[1:] if path[:1] == ["look around"] else path  # the reset already looked

    def close(self) -> None:
        twx, self.twx = getattr(self, "twx", None), None
        if twx is not None:
            twx.close()
            with contextlib.suppress(Exception):  # its __del__ closes again: the JVM must be gone by then
                java = twx._gateway.java_process
                java.wait(timeout=10)
                for pipe in (java.stdin, java.stdout, java.stderr):
                    if pipe is not None:
                        pipe.close()
        super().close()


# ----------------------------------------------------------------------------- ScienceWorld
def science_tasks() -> list[str]:
    """ScienceWorld's task names, from its own task list (no JVM started)."""
    import json

    path = require("scienceworld.constants", "scienceworld").TASK_PATH
    with open(path, encoding="utf-8") as f:
        return [str(t["task_name"]) for t in json.load(f)]


def sorted_lists(text: str) -> str:
    """ScienceWorld's text with each run of tab-indented lines (a room's or a container's
    contents) sorted: the JVM lists the same objects in an order that varies between loads.

    Example:
        >>> sorted_lists("In it, you see:\\n\\tb cup\\n\\ta cup\\nYou also see:")
        'In it, you see:\\n\\ta cup\\n\\tb cup\\nYou also see:'
    """
    out: list[str] = []
    run: list[str] = []
    for line in [*text.split("\n"), None]:
        if line is not None and line.startswith("\t"):
            run.append(line)
            continue
        out += sorted(run)
        run = []
        if line is not None:
            out.append(line)
    return "\n".join(out)


JVM_OPTIONS = threading.Lock()


@contextlib.contextmanager
def heap_limit(limit: str | None) -> Iterator[None]:
    """A JVM started inside gets ``-Xmx{limit}`` through ``JAVA_TOOL_OPTIONS``, unless ``limit``
    is None or the user's own ``JAVA_TOOL_OPTIONS`` sets a heap. Java's default (a quarter of
    the machine's memory, each) let 16 ScienceWorld JVMs grow to 2.6 GB apiece."""
    own = os.environ.get("JAVA_TOOL_OPTIONS")
    if limit is None or "-Xmx" in (own or ""):
        yield
        return
    with JVM_OPTIONS:
        os.environ["JAVA_TOOL_OPTIONS"] = f"{own or ''} -Xmx{limit}".strip()
        try:
            yield
        finally:
            if own is None:
                del os.environ["JAVA_TOOL_OPTIONS"]
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = own


class ScienceWorldEnv(WorldEnv):
    """A ScienceWorld task (30 multi-step science tasks: boil, grow-plant, test-conductivity, ...).

    ## Description
    ``scienceworld.ScienceWorldEnv`` loads ``task``; a reset picks one of the ``split``
    variations (``train``, ``dev``, ``test``) with the env's RNG and loads it.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=256)``: one command (its first line, at most 240
    characters: the gold path's own reach 141, ``move book (the foundations of the origin of
    species) to ...``).

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the task and the room, then ``> ``.

    ## Starting State
    The variation the seed picks.

    ## Rewards
    The change in ScienceWorld's 0-100 score, divided by 100 (it moves on subgoals; a failed
    task drops it below 0).

    ## Episode End
    Terminated when the task is done (score 100) or failed; truncated by the registered limit of
    100 turns.

    ## Arguments
    ``gym.make("lmgym/ScienceWorld-v0", task="find-living-thing", split="train",
    simplification="easy", admissible=False, java_heap="512m", tokenizer=None)``; ``java_heap``
    caps the env's JVM heap (``-Xmx``; ``None``: Java's default, a quarter of the machine's memory).

    ## Version History
    - v0: first version.
    """

    scale = 100.0
    max_score = 100.0
    max_command_chars = 240  # ScienceWorld runs in a JVM: no interpreter buffer to protect
    max_action_tokens = 256

    def __init__(
        self,
        task: str = "find-living-thing",
        split: str = "train",
        simplification: str = "easy",
        admissible: bool = False,
        java_heap: str | None = "512m",
        **kwargs: Any,
    ):
        super().__init__(admissible, **kwargs)
        module = require("scienceworld", "scienceworld")
        if split not in ("train", "dev", "test"):
            raise ValueError(f"split must be train, dev or test, got {split!r}")
        check_name("ScienceWorld task", task, science_tasks(), "scienceworld")
        self.what = f"ScienceWorld task {task!r}"
        require_java(self.what)
        with named_errors(self.what), heap_limit(java_heap):
            self.sw = module.ScienceWorldEnv("", envStepLimit=10**6)
            self.sw.load(task, 0, simplification, generateGoldPath=True)
            self.variations = list(getattr(self.sw, f"get_variations_{split}")())
        self.task, self.split, self.simplification = task, split, simplification

    def begin(self, seed: int) -> tuple[str, str, float]:
        variation = self.variations[seed % len(self.variations)]
        # loaded again each time: ScienceWorld's own reset() orders a room's objects differently
        self.sw.load(self.task, variation, self.simplification, generateGoldPath=True)
        obs, info = self.sw.reset()
        return str(self.sw.get_task_description()), sorted_lists(str(obs)), float(info["score"])

    def play(self, command: str) -> tuple[str, float, bool, bool]:
        obs, _, done, info = self.sw.step(command)
        score = float(info["score"])
        return sorted_lists(str(obs)), score, score >= 100, bool(done) and score < 100

    def commands(self) -> list[str]:
        return sorted(self.sw.get_valid_action_object_combinations())

    def gold(self) -> list[str]:
        return list(self.sw.get_gold_action_sequence())

    def close(self) -> None:
        sw = getattr(self, "sw", None)
        if sw is not None:
            sw.close()
        super().close()


__all__ = ["ScienceWorldEnv", "TextWorldExpressEnv", "WorldEnv"]
