"""``LibraryEnv``: the base of the task-library adapters (GEM, TextArena, SkyRL-gym, reasoning-gym,
verifiers, the text worlds), as ``WorldEnv`` is the text worlds'. It holds what each adapter
would otherwise hand-roll its own way:

- one seeding rule (``library_seed``): the library's seed comes from the env's ``np_random``, so
  ``reset(seed=s)`` gives the same first observation and the same task every time, and the
  library's draws from Python's and numpy's global RNGs are the env's own stream (``OwnRNG``),
  whatever other envs in other threads draw;
- one way to call the library (``call``): inside the env's RNG, any exception it raises comes
  out as one ``LibraryError`` naming the env, the task and the action;
- one info cleaner (``plain_info``) and one message renderer (``render_messages``);
- the GuessTheNumber oracle two libraries ship the game of (``bisection``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from typing import Any

from lmgym.compat import OwnRNG, named_errors
from lmgym.core import LMEnv


class LibraryEnv(LMEnv):
    """An lmgym env that plays a task library's env (module docs). Subclasses set ``what`` (the
    env and task, named in errors) and call ``library_seed`` in ``reset``, ``call`` around every
    library call."""

    what = "a task library's env"

    def __init__(
        self,
        tokenizer: Any = None,
        render_mode: str | None = None,
        max_action_tokens: int | None = None,
        max_observation_length: int | None = None,
    ):
        super().__init__(tokenizer, render_mode, max_action_tokens, max_observation_length)
        self.rng = OwnRNG()

    def library_seed(self) -> int:
        """The seed for the library's own ``reset``: drawn from the env's ``np_random`` (reseeded by
        ``reset(seed=s)``), and the env's global-RNG stream seeded with it. Call it after
        ``super().reset(seed=seed)``."""
        seed = int(self.np_random.integers(2**31))
        self.rng.seed(seed)
        return seed

    @contextlib.contextmanager
    def call(self, doing: str = "", action: str | None = None, rng: bool = True) -> Iterator[None]:
        """``with self.call("reset"):`` a library call: its exceptions one ``LibraryError`` naming
        ``what`` (and ``doing``, the action), and, with ``rng``, inside the env's own global-RNG
        stream (which holds ``OwnRNG``'s process-wide lock: a library that draws only from its own
        generators, or runs elsewhere, a JVM, passes ``rng=False`` so envs in threads overlap)."""
        with self.rng if rng else contextlib.nullcontext(), named_errors(f"{self.what} {doing}".strip(), action):
            yield

    @staticmethod
    def plain_info(info: Any) -> dict[str, Any]:
        """A library's info as lmgym passes it on: its entries whose values are plain scalars
        (numbers, strings, booleans), so that a vector env stacks them into arrays of one type and
        JSON keeps them; anything else (``None``, lists, objects) is left out.

        Example:
            >>> LibraryEnv.plain_info({"turn": 2, "board": [[1, 0]], "engine": object(), "guess": None, 3: "x"})
            {'turn': 2, '3': 'x'}
        """
        if not isinstance(info, dict):
            return {}
        return {str(k): v for k, v in info.items() if isinstance(v, (str, int, float, bool))}

    @staticmethod
    def render_messages(messages: Any, tools: Any = None) -> str:
        """Chat messages as the model reads them: their contents (a string, or a content's text
        parts), a blank line apart, the tools offered first; a string as it is.

        Example:
            >>> messages = [{"role": "system", "content": "Be brief."}, {"content": [{"text": "2+2?"}]}]
            >>> LibraryEnv.render_messages(messages)
            'Be brief.\\n\\n2+2?'
        """
        if isinstance(messages, str):
            return messages
        parts = [f"Tools: {json.dumps(tools)}"] if tools else []
        parts += [text for m in messages or [] if isinstance(m, dict) and (text := content_text(m.get("content")))]
        return "\n\n".join(parts)


def content_text(content: Any) -> str:
    """A message's content as text: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def bisection(low: int, high: int, hints: Iterable[tuple[str, int]]) -> int:
    """GuessTheNumber's oracle: the middle of what the hints so far leave (``("higher", n)``: the
    number is above n; ``("lower", n)``: below).

    Example:
        >>> bisection(1, 20, [("higher", 10), ("lower", 15)])
        12
    """
    for hint, n in hints:
        low, high = (max(low, n + 1), high) if hint == "higher" else (low, min(high, n - 1))
    return (low + high) // 2


__all__ = ["LibraryEnv", "bisection", "content_text"]
