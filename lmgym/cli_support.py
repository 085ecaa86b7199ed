"""What the ``lmgym`` command and its ``train``/``eval`` subcommands share: one-line usage
errors, env ids checked with a hint, and ``--env-arg KEY=VALUE`` parsing."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


def lmgym_ids() -> list[str]:
    return sorted(i for i in gym.registry if i.startswith("lmgym/"))


def check_env_id(env_id: str) -> str:
    if env_id in gym.registry:
        return env_id
    close = difflib.get_close_matches(env_id, lmgym_ids(), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; registered: {', '.join(lmgym_ids())}"
    raise UsageError(f"unknown env id {env_id!r}{hint}")


def make_env(env_id: str, /, **kwargs: Any) -> gym.Env:
    """``gym.make``, with an unknown id or a bad argument turned into one ``UsageError`` line."""
    from lmgym.compat import LibraryError

    check_env_id(env_id)
    try:
        return gym.make(env_id, **kwargs)
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad argument for {env_id}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    except (ImportError, LibraryError) as e:  # a task library that is missing or needs what is not here
        raise UsageError(f"{env_id}: {str(e).splitlines()[0]}") from e


def parse_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["max_digits=2", "operators=+-"]`` -> ``{"max_digits": 2, "operators": "+-"}``."""
    import ast

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"env argument {item!r} is not KEY=VALUE")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out
