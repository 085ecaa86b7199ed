"""``lmgym eval``: greedy (and sampled) success of a saved model on held-out seeds."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lmgym.cli.options import (
    Interrupted,
    RunError,
    UsageError,
    add_model_flags,
    add_tools_flag,
    check_inputs,
    close_within,
    failure_line,
    make_env,
    parse_kwargs,
    table,
    with_tools,
)
from lmgym.cli.session import check_chat_template, make_agent, make_envs, quiet_transformers, set_threads


def add_parser(sub: Any) -> None:
    p = sub.add_parser("eval", help="greedy success on held-out seeds (and sampled, with --sampled)")
    p.add_argument("env_id")
    p.add_argument("--model", required=True, help="a directory saved by lmgym train (or any HF model path)")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--num-envs", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--sampled", action="store_true", help="also play the episodes sampled (default: greedy only)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    add_tools_flag(p)
    add_model_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=evaluate_command)


def evaluate_command(args: argparse.Namespace) -> None:
    """``lmgym eval``: a failure after the input is checked (an env that raises, a model that does
    not load) is one line, its traceback in a temporary file."""
    check_inputs(args)
    try:
        evaluate_model(args)
    except (UsageError, RunError):
        raise
    except KeyboardInterrupt as e:
        raise Interrupted(failure_line(e, temporary_log())) from e
    except BaseException as e:  # noqa: BLE001 (one line; the traceback in a file)
        raise RunError(failure_line(e, temporary_log())) from e


def temporary_log() -> Path:
    import tempfile

    fd, name = tempfile.mkstemp(prefix="lmgym-eval-", suffix=".log")
    os.close(fd)
    return Path(name)


def evaluate_model(args: argparse.Namespace) -> None:
    from lmgym.agents.config import PPOConfig

    if not os.path.exists(args.model):
        raise UsageError(f"--model {args.model!r} does not exist")
    from lmgym.agents.evaluation import evaluate

    set_threads(None)
    quiet_transformers()
    from lmgym.agents.models import read_manifest

    try:
        manifest = read_manifest(args.model)  # how the model was trained: its chat template, system message, tools
    except ValueError as e:
        raise UsageError(f"--model: {e}") from e
    args.chat_template = args.chat_template or bool(manifest.get("chat_template"))
    args.system = args.system if args.system is not None else manifest.get("system")
    args.tools = args.tools or manifest.get("tools")  # the tools it was trained with
    env_kwargs = {**manifest.get("env_kwargs", {}), **parse_kwargs(args.env_arg)}  # --env-arg overrides
    close_within(with_tools(make_env(args.env_id, **env_kwargs), args.tools))  # the manifest's, checked as flags are
    agent = make_agent(args, PPOConfig(seed=args.seed), env_kwargs)
    check_chat_template(args, agent.tokenizer)
    envs = make_envs(args, min(args.num_envs, args.episodes), agent.tokenizer, env_kwargs)
    if not args.json:
        wrapped = [f"tools {args.tools}"] * bool(args.tools) + ["its chat template"] * bool(args.chat_template)
        print(f"{args.env_id}{' with ' + ' and '.join(wrapped) if wrapped else ''}, {env_kwargs or 'no env args'}")
    results = {"greedy": evaluate(agent, envs, args.episodes, greedy=True, progress=True)[0]}
    if args.sampled:
        results["sampled"] = evaluate(agent, envs, args.episodes, greedy=False, progress=True)[0]
    if args.json:
        print(json.dumps({**results["greedy"], **({"sampled": results["sampled"]} if args.sampled else {})}))
        return
    rows = [
        [name, f"{s['success']:.1%}", f"{s['tool_rate']:.1%}", f"{s['mean_return']:.3f}", str(s["episodes"])]
        for name, s in results.items()
    ]
    print(table(["", "success", "tool-call rate", "mean return", "episodes"], rows))


__all__ = ["add_parser", "evaluate_command"]
