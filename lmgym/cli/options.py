"""What the ``lmgym`` subcommands share: one ``UsageError`` for bad input, env ids checked with a
hint, ``--env-arg KEY=VALUE`` parsing, the chat-model flags, and the ``PPOConfig`` flags."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit status 2."""


class RunError(Exception):
    """A run that failed after it started (an env that raised): printed as one line, exit status 1."""

    status = 1
    said = "failed"


class Interrupted(RunError):
    """A run stopped by Ctrl-C (``KeyboardInterrupt``): one line, exit status 130."""

    status = 130
    said = "interrupted"


def failure_line(error: BaseException, log: Any, more: str = "") -> str:
    """One line for a failure whose traceback is written to ``log`` (a path): an ``EnvError``'s
    own message (it names its env), else the error's type and first line; ``more`` is added in the
    parentheses that say where the traceback is."""
    import traceback

    from lmgym.core import EnvError
    from lmgym.storage import write_aside

    said = str(error).strip().splitlines()[0][:400] if str(error).strip() else ""
    line = said if isinstance(error, EnvError) else f"{type(error).__name__}{f': {said}' if said else ''}"
    try:
        write_aside(log, "".join(traceback.format_exception(error)))
    except OSError as e:  # a full disk, say
        return f"{line} (its traceback could not be written to {log}: {e.strerror or e}{more})"
    return f"{line} (traceback in {log}{more})"


def import_env_module(env_id: str) -> tuple[str, str | None]:
    """``module:Name-v0``, as ``gym.make`` takes it: imports ``module`` (which registers the env,
    e.g. a user's own) and returns ``("Name-v0", module)``; any other id as ``(id, None)``."""
    import importlib

    module, sep, name = env_id.rpartition(":")
    if not sep:
        return env_id, None
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise UsageError(f"cannot import {module!r} for the env {name!r}: {e}") from e
    return name, module


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


def close_within(env: gym.Env, seconds: float = 10.0) -> None:
    """Closes ``env``, leaving a close that hangs to finish in the background after ``seconds``."""
    from lmgym.core import call_with_timeout

    try:
        call_with_timeout(env.close, timeout=seconds)
    except Exception:  # noqa: BLE001 (a failing close loses nothing here)
        pass


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


def add_tools_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tools",
        default=None,
        metavar="NAMES",
        help="tools for the env, comma-separated: calc, python (ToolUse; its prompt says how to call them)",
    )


def with_tools(env: gym.Env, tools: str | None) -> gym.Env:
    """``env`` in ``ToolUse`` with the tools ``--tools`` names (and how to call them in its prompt),
    and its turn limit outside, so that tool calls count as turns."""
    if not tools:
        return env
    from lmgym.tools import make_tools
    from lmgym.wrappers import ToolUse

    try:
        wrapped: gym.Env = ToolUse(env, make_tools(tools), instructions=True)
    except ValueError as e:
        raise UsageError(f"--tools: {e}") from e
    limit = env.spec.max_episode_steps if env.spec else None  # gym.make's TimeLimit is inside: it sees no tool call
    return gym.wrappers.TimeLimit(wrapped, limit) if limit else wrapped


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """The flags for a chat model: wrap the env in its chat template."""
    p.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap the env in the tokenizer's chat template (observations as user turns, actions as assistant turns)",
    )
    p.add_argument("--system", default=None, help="system message for --chat-template")


SKIPPED_FIELDS = ("seed", "estimator", "generation_kwargs", "peft_config")
"""PPOConfig settings with flags of their own (``--seed``, ``--estimator``, ``--generation-kwargs``, ``--lora``)."""


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """A flag per ``PPOConfig`` setting, under its flat name (``--overlap-rollout``, ``--engine``)."""
    from lmgym.agents.config import flat_fields

    for name, field, default in flat_fields():
        if name in SKIPPED_FIELDS:
            continue
        switch = "bool" in str(field.type)  # --gradient-checkpointing alone means true
        extra: dict[str, Any] = {"nargs": "?", "const": True} if switch else {}
        kind = " (JSON)" if str(field.type).startswith("dict") else ""
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=f"cfg_{name}",
            metavar=name.upper(),
            type=_field_type(field),
            default=None,
            help=f"PPOConfig {name}{kind} (default: {default})".replace("%", "%%"),
            **extra,
        )


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``PPOConfig`` settings given on the command line, under their flat names."""
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg_") and v is not None}


def _field_type(field: dataclasses.Field) -> Any:
    kind = str(field.type)
    if kind.startswith("dict"):
        return json.loads
    if "bool" in kind:
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    if "float" in kind:
        return lambda s: None if s.lower() == "none" else float(s)
    if "int" in kind:
        return lambda s: None if s.lower() == "none" else int(s)
    return str


def check_inputs(args: argparse.Namespace) -> None:
    """Bad input fails here, in one line, before torch is even imported."""
    from lmgym.agents.checkpoints import CheckpointError, resolve, verify

    env = make_env(args.env_id, **parse_kwargs(args.env_arg))  # a bad --env-arg fails here
    close_within(with_tools(env, getattr(args, "tools", None)))  # a bad --tools fails here too
    least_values = [("episodes", 1), ("num_envs", 1), ("eval_episodes", 1), ("threads", 1), ("eval_every", 0)]
    for flag, least in least_values + [("env_workers", 0), ("env_worker_cpus", 0)]:
        value = getattr(args, flag, None)
        if value is not None and not least <= value < float("inf"):
            raise UsageError(f"--{flag.replace('_', '-')} must be at least {least}, got {value}")
    if getattr(args, "stop_at_success", None) is not None and not 0 <= args.stop_at_success <= 1:
        raise UsageError(f"--stop-at-success must be a success rate in [0, 1], got {args.stop_at_success}")
    if getattr(args, "warmstart_steps", None) is not None and args.warmstart_steps < 0:
        raise UsageError(f"--warmstart-steps must be at least 0, got {args.warmstart_steps}")
    kwargs = getattr(args, "generation_kwargs", None)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise UsageError(f"--generation-kwargs must be a JSON object, got {json.dumps(kwargs):.80}")
    if (
        args.model is not None
        and not os.path.exists(args.model)
        and (os.sep in args.model or args.model.startswith("."))
    ):
        raise UsageError(f"--model {args.model!r} does not exist")
    out = getattr(args, "out", None)
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out!r} is a file, not a directory")
    if getattr(args, "resume", None) is not None:
        try:
            verify(resolve(args.resume))  # complete and undamaged, before any model is built
        except CheckpointError as e:
            raise UsageError(f"--resume: {e}") from e


def table(header: list[str], rows: list[list[str]]) -> str:
    """A plain text table, the first column left-aligned and the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


__all__ = [
    "UsageError",
    "add_config_flags",
    "add_model_flags",
    "add_tools_flag",
    "check_env_id",
    "import_env_module",
    "with_tools",
    "check_inputs",
    "config_overrides",
    "lmgym_ids",
    "make_env",
    "parse_kwargs",
    "table",
]
