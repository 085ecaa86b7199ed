"""TextWorld-v0: Microsoft TextWorld's generated text adventures (``pip install 'lmgym[textworld]'``).

A game is made from a challenge (``tw-simple``, ``tw-cooking``, ``tw-coin_collector``,
``tw-treasure_hunter``, or ``custom`` for ``textworld.generator.make_game``), its settings and
a game seed, compiled once to a ``.z8`` file under ``lmgym``'s cache dir
(``$LMGYM_CACHE/textworld``) and played by jericho. Inform 7, which compiles it, writes its
home folder there too (``Inform/``); nothing else is written outside the system's temp dir.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import unittest.mock
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lmgym.compat import check_name, named_errors, require
from lmgym.compat.worlds import WorldEnv
from lmgym.storage import cache_dir

DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "tw-simple": {"rewards": "dense", "goal": "detailed"},
    "tw-coin_collector": {"level": 1},
    "tw-treasure_hunter": {"level": 1},
    "tw-cooking": {},
    "custom": {"nb_rooms": 2, "nb_objects": 4, "quest_length": 2},
}
"""What a challenge is made with when ``options`` does not say (the required settings of
``tw-make``'s own flags, and a small ``custom`` game)."""
OPTIONS = ("nb_rooms", "nb_objects", "quest_length", "quest_breadth", "nb_parallel_quests")
"""The ``textworld.GameOptions`` fields ``options`` may set; its other keys are the challenge's."""
COMPILING = threading.Lock()  # Inform 7 reads HOME from the environment: one compile at a time


class Refusal(argparse.ArgumentParser):
    """``tw-make``'s parser for a challenge's settings, raising ``ValueError`` where it would exit."""

    def error(self, message: str) -> Any:
        raise ValueError(message)


def settings_for(challenge: str, options: dict[str, Any]) -> dict[str, Any]:
    """The challenge's settings: ``options``' keys for it over ``DEFAULT_SETTINGS``, checked by
    the challenge's own argument parser (unknown keys and bad values are a ``ValueError``)."""
    chosen = {**DEFAULT_SETTINGS[challenge], **{k: v for k, v in options.items() if k not in OPTIONS}}
    if challenge == "custom":
        unknown = set(chosen) - set(OPTIONS)
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} for a custom game: one of {list(OPTIONS)}")
        return {}
    parser = Refusal(prog=challenge, add_help=False)
    require("textworld.challenges", "textworld").CHALLENGES[challenge][2](parser)
    argv = []
    for key, value in chosen.items():
        flag = f"--{key.replace('_', '-')}"
        argv += ([flag] if value is True else []) if isinstance(value, bool) else [flag, str(value)]
    return vars(parser.parse_args(argv))


def game_file(challenge: str, options: dict[str, Any], seed: int) -> Path:
    """The compiled game for ``(challenge, options, seed)``, made on first use and cached; other
    processes making the same game wait for it (a lock file beside it)."""
    textworld = require("textworld", "textworld")
    folder = cache_dir() / "textworld"
    folder.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps([challenge, options, seed], sort_keys=True).encode()).hexdigest()[:16]
    path = folder / f"{challenge}-{seed}-{key}.z8"
    with open(folder / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and path.with_suffix(".json").is_file():
            return path
        game_options = textworld.GameOptions()
        game_options.seeds = seed
        for name in OPTIONS:
            if name in options:
                setattr(game_options, name, int(options[name]))
        game_options.path, game_options.file_ext, game_options.force_recompile = str(path), ".z8", True
        # Inform 7 writes ~/Inform: here, not in the user's home
        with COMPILING, unittest.mock.patch.dict(os.environ, HOME=str(folder)):
            if challenge == "custom":
                game = textworld.generator.make_game(game_options)
            else:
                game = textworld.challenges.CHALLENGES[challenge][1](settings_for(challenge, options), game_options)
            textworld.generator.compile_game(game, game_options)
    return path


@contextlib.contextmanager
def quiet_jericho() -> Iterator[None]:
    """jericho warns that a generated game is not one of its supported ones and that it cannot
    list its valid actions (TextWorld lists them itself): nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="jericho")
        yield


class TextWorldEnv(WorldEnv):
    """A TextWorld game, generated from a challenge and a seed.

    ## Description
    A reset picks a game seed with the env's RNG (one of ``games`` seeds, or any with
    ``games=None``), makes that game (``game_file``: compiled once, then cached) and starts it.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=128)``: one command (its first line).

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the objective and the game's text (its banner
    left out), then ``> ``; with ``admissible=True`` the commands the game accepts.

    ## Starting State
    The game the seed picks, at its start.

    ## Rewards
    The change in the game's score (TextWorld's points; ``info["max_score"]`` is the most).

    ## Episode End
    Terminated on a win or a loss; truncated by the registered limit of 50 turns.

    ## Arguments
    ``gym.make("lmgym/TextWorld-v0", challenge="tw-simple", options={"rewards": "dense",
    "goal": "detailed"}, games=32, admissible=False, tokenizer=None)``. ``options`` holds the
    challenge's settings (``tw-make``'s flags: ``rewards``, ``goal``, ``level``, ``recipe``...)
    and ``textworld.GameOptions`` fields (``nb_rooms``, ``nb_objects``, ``quest_length``...).

    ## Version History
    - v0: first version.
    """

    def __init__(
        self,
        challenge: str = "tw-simple",
        options: dict[str, Any] | None = None,
        games: int | None = 32,
        admissible: bool = False,
        **kwargs: Any,
    ):
        super().__init__(admissible, **kwargs)
        textworld = require("textworld", "textworld")
        check_name("TextWorld challenge", challenge, list(DEFAULT_SETTINGS), "textworld")
        if games is not None and int(games) < 1:
            raise ValueError(f"games must be at least 1 (or None: a game per seed), got {games}")
        self.challenge, self.options, self.games = challenge, dict(options or {}), games
        settings_for(challenge, self.options)  # bad settings fail here, before any game is made
        self.what = f"TextWorld {challenge!r} game"
        self.infos = textworld.EnvInfos(
            admissible_commands=True, policy_commands=True, won=True, lost=True, max_score=True, objective=True
        )
        self.game: Any = None
        self.playing: Path | None = None
        self.state: Any = None

    def begin(self, seed: int) -> tuple[str, str, float]:
        with quiet_jericho():
            return self.start(seed)

    def start(self, seed: int) -> tuple[str, str, float]:
        textworld = require("textworld", "textworld")
        path = game_file(self.challenge, self.options, seed % self.games if self.games else seed)
        if path != self.playing:
            if self.game is not None:
                self.game.close()
            self.game, self.playing = textworld.start(str(path), request_infos=self.infos), path
        self.state = self.game.reset()
        self.max_score = float(self.state.max_score)
        return str(self.state.objective or ""), str(self.state.feedback), float(self.state.score or 0)

    def play(self, command: str) -> tuple[str, float, bool, bool]:
        with quiet_jericho():
            self.state, score, _ = self.game.step(command)
        return str(self.state.feedback), float(score), bool(self.state.won), bool(self.state.lost)

    def commands(self) -> list[str]:
        return list(self.state.admissible_commands or [])

    def oracle(self) -> str:
        """The game's next policy command from where the episode is (TextWorld recomputes it)."""
        with named_errors(self.what):
            policy = list(self.state.policy_commands or []) if self.state is not None else []
        if not policy:
            raise NotImplementedError(f"{self.what}: no policy command from here")
        return str(policy[0])

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None
        super().close()


__all__ = ["TextWorldEnv", "game_file"]
