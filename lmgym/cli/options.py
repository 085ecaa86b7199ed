"""What the ``lmgym`` subcommands share: one ``UsageError`` for bad input, env ids checked with a
hint, ``--env-arg KEY=VALUE`` parsing, the chat-model flags, and the ``PPOConfig`` flags."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from lmgym.cli.errors import UsageError
from lmgym.cli.spec import parse_kwargs
from lmgym.core import close_within

if TYPE_CHECKING:
    from lmgym.cli.spec import RunSpec


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


def add_env_flags(p: argparse.ArgumentParser, tools: bool = True) -> None:
    """``--env-arg KEY=VALUE`` (repeatable ``gym.make`` arguments) and, with ``tools``, ``--tools``."""
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="gym.make argument (repeatable)")
    if tools:
        add_tools_flag(p)


def add_run_flags(
    p: argparse.ArgumentParser, num_envs: int | None, episodes: tuple[int | None, str] | None, seed: int | None = 0
) -> None:
    """``--seed``, and where given, ``--num-envs`` (its default), ``--episodes`` (default, help)
    and ``--threads``: how much a command plays and with what."""
    p.add_argument("--seed", type=int, default=seed, help=f"the run's seed (default: {seed})")
    if num_envs is not None:
        p.add_argument("--num-envs", type=int, default=num_envs, help=f"envs at once (default: {num_envs})")
        p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores, at most 2)")
    if episodes is not None:
        p.add_argument("--episodes", type=int, default=episodes[0], help=episodes[1])


def add_output_flags(p: argparse.ArgumentParser, out: tuple[str | None, str] | None = None, port: bool = False) -> None:
    """``--out`` (default, help), ``--overwrite`` where ``out`` is a directory to replace, ``--port``."""
    if out is not None:
        p.add_argument("--out", default=out[0], help=out[1])
    if port:
        p.add_argument("--port", type=int, default=8000, help="the localhost port (default: 8000; 0 picks a free one)")


def add_overwrite_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--overwrite", action="store_true", help=f"replace {what} (default: refuse)")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout, and nothing else")


def add_model_flags(
    p: argparse.ArgumentParser, model: str | None = None, required: bool = False, training: bool = False
) -> None:
    """``--model`` (its help: ``model``), the flags for a chat model (wrap the env in its chat
    template, a system message), and with ``training`` how the model is trained: ``--lora`` and
    ``--warmstart-steps``."""
    if model is not None:
        p.add_argument("--model", default=None, required=required, help=model)
    if training:
        p.add_argument(
            "--lora",
            default=None,
            metavar="SPEC",
            help="LoRA adapters, e.g. r=16 or r=16,alpha=32,targets=q_proj+v_proj; none: full fine-tuning "
            "(default with --model: r=16 when peft is installed)",
        )
        p.add_argument(
            "--warmstart-steps",
            type=int,
            default=None,
            help="supervised steps on the env's demonstrations before RL (default model: 1600; --model: none "
            "unless given; 0: RL from rewards alone)",
        )
    p.add_argument(
        "--chat-template",
        action="store_true",
        help="wrap the env in the tokenizer's chat template (observations as user turns, actions as assistant turns)",
    )
    p.add_argument("--system", default=None, help="system message for --chat-template")


def add_samples_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="K",
        help="evaluations also play each held-out task K times sampled: pass@K and the sampled success rate",
    )


def add_ray_flags(p: argparse.ArgumentParser) -> None:
    """``--ray``, ``--env-workers``, ``--env-worker-cpus``: the envs in Ray actors."""
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: join the cluster at ADDRESS (auto: the one running here), or start a local one",
    )
    p.add_argument("--env-workers", type=int, default=0, help="Ray actors that hold the envs (0: threads here)")
    p.add_argument(
        "--env-worker-cpus",
        type=float,
        default=None,
        help="CPUs each env actor holds while it runs (default: Ray's own, one to be placed and none while it runs)",
    )


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """A flag per ``PPOConfig`` setting (``lmgym.cli.spec.config_flags``: ``--overlap-rollout``,
    ``--engine``, ``--step-timeout``, ...), its type from the field's and its choices from
    ``config.CHOICES``, and ``--estimator``; ``RunSpec.from_args`` reads them back by setting."""
    from lmgym.agents.config import CHOICES, ESTIMATORS, field_types
    from lmgym.cli.spec import config_flags

    p.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        default=None,
        help="advantage estimator (default: gae; rloo from rewards alone with --model)",
    )
    types = field_types()
    for name, path, _, default in config_flags():
        kind = types[path]
        switch = kind is bool  # --gradient-checkpointing alone means true
        extra: dict[str, Any] = {"nargs": "?", "const": True} if switch else {}
        json_kind = " (JSON)" if typing.get_origin(kind) is dict else ""
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=f"cfg_{name}",
            metavar=None if path in CHOICES else name.upper(),
            type=flag_type(kind),
            choices=CHOICES.get(path),
            default=None,
            help=f"PPOConfig {'.'.join(path)}{json_kind} (default: {default})".replace("%", "%%"),
            **extra,
        )


def flag_type(kind: Any) -> Callable[[str], Any]:
    """How a flag's text becomes a value of the field's type ``kind``: JSON for a dict, yes/no for
    a bool, a number, a string; ``none`` is ``None`` where the field takes it.

    Example:
        >>> flag_type(int | None)("none"), flag_type(float)("0.28"), flag_type(bool)("true"), flag_type(str)("dapo")
        (None, 0.28, True, 'dapo')
    """
    args = typing.get_args(kind)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), kind) if optional else kind
    if typing.get_origin(base) is dict:
        return json.loads
    if base is bool:
        return lambda s: s.lower() in ("1", "true", "yes", "on")
    if base in (int, float):
        return lambda s: None if optional and s.lower() == "none" else base(s)
    return str


def check_inputs(spec: RunSpec) -> None:
    """Bad input fails here, in one line, before torch is even imported: the env and its
    arguments, the tools, the numbers, the config flags, the paths, a checkpoint to resume."""
    from lmgym.agents.checkpoints import CheckpointError, resolve, verify
    from lmgym.agents.config import PPOConfig
    from lmgym.cli.spec import nested

    if "tokenizer" in spec.env_kwargs:
        raise UsageError("--env-arg tokenizer: lmgym makes the env with the model's tokenizer itself")
    close_within(with_tools(make_env(spec.env_id, **spec.env_kwargs), spec.tools))  # a bad --env-arg or --tools
    least = [("episodes", 1), ("num_envs", 1), ("eval_episodes", 1), ("threads", 1), ("eval_every", 0)]
    for flag, low in least + [("env_workers", 0), ("env_worker_cpus", 0), ("samples", 0)]:
        value = getattr(spec, flag)
        if value is not None and not low <= value < float("inf"):
            raise UsageError(f"--{flag.replace('_', '-')} must be at least {low}, got {value}")
    if spec.env_worker_cpus and spec.ray in (None, "local") and spec.env_worker_cpus > (os.cpu_count() or 1):
        raise UsageError(
            f"--env-worker-cpus {spec.env_worker_cpus:g}: this machine has {os.cpu_count()} CPUs, so the local Ray "
            "cluster could place no env actor"
        )
    if spec.stop_at_success is not None and not 0 <= spec.stop_at_success <= 1:
        raise UsageError(f"--stop-at-success must be a success rate in [0, 1], got {spec.stop_at_success}")
    if spec.warmstart_steps is not None and spec.warmstart_steps < 0:
        raise UsageError(f"--warmstart-steps must be at least 0, got {spec.warmstart_steps}")
    if spec.generation_kwargs is not None and not isinstance(spec.generation_kwargs, dict):
        raise UsageError(f"--generation-kwargs must be a JSON object, got {json.dumps(spec.generation_kwargs):.80}")
    settings: dict[str, Any] = nested(spec.settings)
    estimator = spec.estimator or ("rloo" if spec.model else None)  # a recipe's group estimator: run_config checks
    settings.update({"estimator": estimator} if estimator else {})
    try:
        PPOConfig(**settings)  # a bad config flag (--step-timeout inf, --engine-kwargs '[1]')
    except (TypeError, ValueError) as e:
        raise UsageError(str(e)) from e
    if spec.model is not None and not os.path.exists(spec.model) and (os.sep in spec.model or spec.model[:1] == "."):
        raise UsageError(f"--model {spec.model!r} does not exist")
    if spec.command == "train" and spec.out.exists() and not spec.out.is_dir():
        raise UsageError(f"--out {str(spec.out)!r} is a file, not a directory")
    if spec.resume is not None:
        try:
            verify(resolve(spec.resume))  # complete and undamaged, before any model is built
        except CheckpointError as e:
            raise UsageError(f"--resume: {e}") from e


def json_only(on: bool) -> contextlib.AbstractContextManager:
    """With ``--json`` (``on``), what a command prints on the way (progress, notes, what it picked)
    goes to stderr, so that stdout holds the one JSON document and nothing else."""
    return contextlib.redirect_stdout(sys.stderr) if on else contextlib.nullcontext()


def table(header: list[str], rows: list[list[str]]) -> str:
    """A plain text table, the first column left-aligned and the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


__all__ = [
    "UsageError",
    "add_config_flags",
    "add_ray_flags",
    "add_samples_flag",
    "add_env_flags",
    "add_json_flag",
    "add_model_flags",
    "add_output_flags",
    "add_overwrite_flag",
    "add_run_flags",
    "add_tools_flag",
    "check_env_id",
    "import_env_module",
    "with_tools",
    "check_inputs",
    "close_within",
    "json_only",
    "lmgym_ids",
    "make_env",
    "parse_kwargs",
    "table",
]
