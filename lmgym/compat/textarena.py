"""TextArena-v0: TextArena's games as lmgym envs (``pip install 'lmgym[textarena]'``).

Single-player games run as they are; a two-player game takes an ``opponent`` (a callable
``str -> str``, ``"random"`` for a player of random legal moves where the game lists them, or
the path of a model saved by lmgym) and the env routes the turns: ``step`` plays the model's
move, then lets the opponent move until it is the model's turn again or the game is over.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from typing import Any

from lmgym.compat import LibraryError, check_name, require
from lmgym.compat.library import LibraryEnv, bisection

MOVES = re.compile(r"(?:available|valid|legal) moves?\s*:?\s*(.*)", re.IGNORECASE)
BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")


def random_legal_move(observation: str, rng: random.Random) -> str | None:
    """A move drawn from the last list of moves the game printed (``Available Moves: '[4]', ...``),
    or ``None`` when it printed none.

    Example:
        >>> random_legal_move("Board...\\nAvailable Moves: '[0]', '[4]'", random.Random(0)) in ("[0]", "[4]")
        True
    """
    lists = MOVES.findall(observation)
    moves = BRACKETED.findall(lists[-1]) if lists else []
    return rng.choice(moves) if moves else None


class RandomPlayer:
    """The ``"random"`` opponent: a random legal move from the game's own list of moves."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def __call__(self, observation: str) -> str:
        move = random_legal_move(observation, self.rng)
        if move is None:
            raise LibraryError("the game lists no legal moves, so there is no random player for it: pass opponent=fn")
        return move


class ModelOpponent:
    """An opponent played by a model (greedy, up to ``max_new_tokens``): whatever
    ``lmgym.agents.models.load_model`` loads (an HF model dir, a dir saved by lmgym, LoRA
    adapters included, a ``.gguf`` file). The path is checked when the env is made (a causal LM
    config, a tokenizer); the weights load on the first move."""

    def __init__(self, path: str, max_new_tokens: int = 32):
        self.path, self.max_new_tokens = path, max_new_tokens
        self.model: Any = None
        check_model_path(path)

    def __call__(self, observation: str) -> str:
        import torch

        from lmgym.tokenizers import load_tokenizer

        if self.model is None:
            from lmgym.agents.models import load_model

            self.model = load_model(self.path, trainable=False).eval()
            self.tokenizer = load_tokenizer(self.path)
        ids = self.tokenizer.encode(observation)[-(self.model.config.max_position_embeddings - self.max_new_tokens) :]
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([ids]),
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, len(ids) :].tolist())


def check_model_path(path: str) -> None:
    """``ValueError`` unless ``path`` is a model lmgym loads: a ``.gguf`` file, a dir of LoRA
    adapters saved by lmgym, or a dir whose config is a causal LM's and whose tokenizer loads."""
    from lmgym.gguf import is_gguf

    if is_gguf(path):
        return
    if not os.path.isdir(path):
        raise ValueError(f"opponent {path!r} is neither 'random', a model directory nor a .gguf file")
    if os.path.isfile(os.path.join(path, "adapter_config.json")):
        return
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    from lmgym.tokenizers import load_tokenizer

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"opponent {path!r} is not a model directory ({str(e).splitlines()[0]:.150})") from e
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"opponent {path!r} holds a {type(config).__name__}, not a causal language model")
    load_tokenizer(path)  # a model without a usable tokenizer fails here, in one line


def as_opponent(opponent: Any, seed: int = 0) -> Callable[[str], str] | None:
    if opponent is None or callable(opponent):
        return opponent
    if opponent == "random":
        return RandomPlayer(seed)
    if isinstance(opponent, (str, os.PathLike)):
        return ModelOpponent(str(opponent))
    raise ValueError(f"opponent must be a callable str -> str, 'random' or a saved model's path, got {opponent!r:.80}")


class TextArenaEnv(LibraryEnv):
    """A TextArena game: the model plays one side, an opponent (if any) the other.

    ## Description
    ``textarena.make(game + "-raw")`` (the game without TextArena's own wrappers) is built once;
    each ``reset(seed=s)`` resets it with a seed from the env's RNG. The model sees the game's
    messages as ``[GAME] ...`` lines (``[Player 1] ...`` for the opponent's public moves); each
    step plays its move, then the opponent's moves until it is the model's turn again.

    ## Action Space
    ``TokenSequence(vocab_size, max_action_tokens=48)``.

    ## Observation Space
    ``AnyText(max_observation_length=16384)``: the game's prompt and board, then what changed.

    ## Starting State
    TextArena's ``reset``, seeded as above.

    ## Rewards
    0 until the game ends; then the model's reward from TextArena's ``close()`` (1 a win or a
    solved puzzle, -1 a loss, 0 a draw, per game). ``info["correct"]`` is a reward of 1 or more.

    ## Episode End
    Terminated when the game is over; truncated by the registered limit of 200 steps.

    ## Arguments
    ``gym.make("lmgym/TextArena-v0", game="GuessTheNumber-v0", opponent=None, player=0,
    tokenizer=None)``; two-player games need ``opponent``. Games that need the network at run
    time (``nltk`` data, an API judge) say so in one line. ``lmgym list --tasks textarena``.

    ## Version History
    - v0: first version.
    """

    max_action_tokens = 48
    max_observation_length = 16384
    stop_strings: tuple[str, ...] = ("]",)
    special_tokens = ("[GAME]",)

    def __init__(
        self,
        game: str = "GuessTheNumber-v0",
        opponent: Any = None,
        player: int = 0,
        stop_strings: tuple[str, ...] | list[str] = ("]",),
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        ta = require("textarena", "textarena")
        registry = require("textarena.envs.registration", "textarena").ENV_REGISTRY
        check_name("TextArena game", game, [i for i in registry if not i.endswith("-raw")], "textarena")
        self.game, self.player = game, int(player)
        self.stop_strings = tuple(stop_strings)
        self.what = f"TextArena game {game!r}"
        with self.call(), needs_network(self.what):
            self.ta = ta.make(game + "-raw" if game + "-raw" in registry else game)
            self.num_players = self._players()
        if self.num_players == 2:
            if opponent is None:
                raise ValueError(
                    f"{self.what} is a two-player game: pass opponent= (a callable, 'random' or a model path)"
                )
            if self.player not in (0, 1):
                raise ValueError(f"player must be 0 or 1 in a two-player game, got {player}")
        elif self.player != 0:
            raise ValueError(f"{self.what} is a single-player game: player must be 0, got {player}")
        self.opponent = as_opponent(opponent) if self.num_players == 2 else None
        self.opponent_view = ""

    def _players(self) -> int:
        """1 or 2: the player counts the game accepts (more are not supported here)."""
        for n in (1, 2):
            try:
                self.ta.reset(num_players=n, seed=0)
                return n
            except (AssertionError, ValueError, KeyError, TypeError):
                continue
        raise ValueError(f"{self.what} is not a one- or two-player game, which is what lmgym supports")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        inner_seed = self.library_seed()
        if isinstance(self.opponent, RandomPlayer):
            self.opponent.rng.seed(inner_seed)
        with self.call("reset"), needs_network(self.what):
            self.ta.reset(num_players=self.num_players, seed=inner_seed)
        self.opponent_view = ""
        text, done = self._advance(False)
        return text, {"game": self.game}

    def step_text(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self.call(action=text), needs_network(self.what):
            done, _ = self.ta.step(text)
        obs, done = self._advance(done)
        if not done:
            return obs, 0.0, False, False, {"game": self.game}
        with self.call("close"):
            rewards, game_info = self.ta.close()
        reward = float((rewards or {}).get(self.player, 0.0))
        mine = game_info.get(self.player) if isinstance(game_info, dict) else None
        info = {"game": self.game, "correct": reward >= 1.0, "game_info": self.plain_info(mine or game_info)}
        return obs, reward, True, False, info

    def _advance(self, done: bool) -> tuple[str, bool]:
        """Lets the opponent move until the model's turn or the end; the model's new messages."""
        while not done and self.ta.state.current_player_id != self.player:
            opponent = self.ta.state.current_player_id
            self.opponent_view += self._format(self._take(opponent), skip=opponent)
            assert self.opponent is not None
            with self.rng:
                move = str(self.opponent(self.opponent_view))
            self.opponent_view += f"\n[Player {opponent}] {move}"
            with self.call("(the opponent's move)", move):
                done, _ = self.ta.step(move)
        return self._format(self._take(self.player), skip=self.player), done

    def _take(self, player: int) -> list[Any]:
        messages = self.ta.state.observations.get(player, [])
        self.ta.state.observations[player] = []
        return messages

    def _format(self, messages: list[Any], skip: int) -> str:
        """``[GAME] message`` lines, leaving out the player's own moves (already in its context)."""
        lines = []
        for sender, message, *_ in messages:
            if sender == skip:
                continue
            name = "GAME" if sender < 0 else self.ta.state.role_mapping.get(sender, f"Player {sender}")
            lines.append(f"[{name}] {message}")
        return "\n" + "\n".join(lines) + "\n" if lines else "\n"

    def oracle(self) -> str:
        """For GuessTheNumber: bisection over the game's hints (TextArena games have no oracle)."""
        if type(self.ta).__name__ != "GuessTheNumberEnv":
            raise NotImplementedError(f"{self.what} has no oracle in lmgym")
        number = self.ta.game_number
        hints = [("higher" if g < number else "lower", g) for g in self.ta.guessed_numbers if g != number]
        return f"[{bisection(self.ta.min_number, self.ta.max_number, hints)}]"


class needs_network:
    """Turns a game's attempt to reach the network (``nltk`` data, an API judge) into one line."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        if error is None:
            return
        text = str(error)
        if isinstance(error, LookupError) and "nltk" in text.lower():
            resource = re.search(r"Resource\s+(?:\x1b\[\d+m)?'?(\w+)", text)
            name = resource.group(1) if resource else "its data"
            raise LibraryError(f"{self.what} needs the nltk resource {name!r}, downloaded from the network") from error
        if type(error).__module__.startswith(("openai", "requests", "urllib3", "httpx")) or isinstance(
            error, ConnectionError
        ):
            raise LibraryError(f"{self.what} needs the network at run time (an API or a download)") from error


__all__ = ["TextArenaEnv", "random_legal_move"]
