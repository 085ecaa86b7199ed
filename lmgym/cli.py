"""The ``lmgym`` command: ``list``, ``play``, ``view``, ``train`` and ``eval``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import lmgym
from lmgym.cli_support import UsageError, lmgym_ids, make_env, parse_kwargs


def summary_line(env_id: str) -> str:
    """The first line of the env's docstring (the env class behind its entry point)."""
    from lmgym.compat import COMPAT, installed

    if env_id in COMPAT:  # an adapter: its library loads only when one is made
        creator = gym.envs.registration.load_env_creator(str(gym.spec(env_id).entry_point))
        _, _, extra, module = COMPAT[env_id]
        doc = (creator.__doc__ or "").strip().splitlines()
        state = f"lmgym list --tasks {extra}" if installed(module) else f"pip install 'lmgym[{extra}]'"
        return (doc[0] if doc else "") + f" [{state}]"
    env = gym.make(env_id)
    doc = (type(env.unwrapped).__doc__ or "").strip().splitlines()
    try:
        tools = " [tools: " + ", ".join(env.get_wrapper_attr("tools")) + "]"
    except AttributeError:
        tools = ""
    env.close()
    return (doc[0] if doc else "") + tools


def cmd_list(args: argparse.Namespace) -> None:
    if args.tasks:
        from lmgym.compat import task_names

        try:
            names = task_names(args.tasks)
        except (ImportError, ValueError) as e:
            raise UsageError(str(e).splitlines()[0]) from e
        print("\n".join(names))
        return
    ids = lmgym_ids()
    width = max(map(len, ids))
    for env_id in ids:
        print(f"{env_id:<{width}}  {summary_line(env_id)}")


def cmd_play(args: argparse.Namespace, read: Any = input) -> None:
    env = make_env(args.env_id, **parse_kwargs(args.kwargs))
    tokenizer = env.get_wrapper_attr("tokenizer")
    seed = args.seed
    while True:
        obs, _ = env.reset(seed=seed)
        print(obs, end="" if obs.endswith("\n") else "\n")
        total, done = 0.0, False
        while not done:
            try:
                text = read("> ")
            except EOFError:
                print()
                return
            obs, reward, terminated, truncated, _ = env.step(tokenizer.encode(text))
            total += float(reward)
            done = terminated or truncated
            print(f"{obs.rstrip()}\n[reward {reward:g}]" if obs.strip() else f"[reward {reward:g}]")
        print(f"episode over ({'terminated' if terminated else 'truncated'}), return {total:g}")
        seed = None if seed is None else seed + 1
        if not args.repeat:
            return


def cmd_view(args: argparse.Namespace) -> None:
    from lmgym.report import build_report, serve

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        path, skipped = build_report(args.run_dir, args.out)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        raise UsageError(str(e)) from e
    except OSError as e:
        raise UsageError(f"cannot write the report: {e.strerror or e}") from e
    for what in skipped:
        print(f"skipped: {what}", file=sys.stderr)
    print(f"wrote {path} (open it in a browser)")
    if args.serve:
        try:
            serve(path, args.port)
        except OSError as e:
            raise UsageError(f"cannot serve on 127.0.0.1:{args.port}: {e.strerror or e}") from e


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmgym", description=lmgym.__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=lmgym.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the registered lmgym envs")
    p.add_argument(
        "--tasks",
        metavar="LIBRARY",
        choices=["reasoning-gym", "textarena", "gem"],
        help="list a task library's tasks instead (reasoning-gym, textarena, gem)",
    )
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("play", help="play an env by typing actions")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--repeat", action="store_true", help="start a new episode after each one")
    p.add_argument("kwargs", nargs="*", metavar="KEY=VALUE", help="gym.make arguments")
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("view", help="write a run's HTML report (learning curve, config, episodes token by token)")
    p.add_argument("run_dir", help="a run directory (lmgym train --out, or learn's log_dir)")
    p.add_argument("--out", default=None, help="where to write the report (default: RUN_DIR/report.html)")
    p.add_argument("--serve", action="store_true", help="serve it on 127.0.0.1 after writing it")
    p.add_argument("--port", type=int, default=8000, help="port for --serve (default: 8000; 0 picks a free one)")
    p.set_defaults(func=cmd_view)

    from lmgym.train import add_train_commands

    add_train_commands(sub, UsageError)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UsageError as e:
        print(f"lmgym {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `lmgym list | head`
        return 0
    return 0


if __name__ == "__main__":
    from lmgym.cli import main as cli_main  # one UsageError class, whichever way the module loads

    sys.exit(cli_main())
