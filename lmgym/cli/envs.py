"""``lmgym list`` and ``lmgym play``: the registered envs, and an env played by hand."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import gymnasium as gym

from lmgym.cli.options import UsageError, add_env_flags, add_run_flags, lmgym_ids, make_env, parse_kwargs, with_tools
from lmgym.compat import TASK_LIBRARIES
from lmgym.core import close_within


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("list", help="list the registered lmgym envs")
    p.add_argument(
        "--tasks",
        metavar="LIBRARY",
        choices=TASK_LIBRARIES,
        help=f"list a task library's tasks instead ({', '.join(TASK_LIBRARIES)})",
    )
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("play", help="play an env by typing actions")
    p.add_argument("env_id")
    add_run_flags(p, num_envs=None, episodes=None, seed=None)
    p.add_argument("--repeat", action="store_true", help="start a new episode after each one")
    add_env_flags(p)
    p.add_argument("kwargs", nargs="*", metavar="KEY=VALUE", help="(old form, warns) gym.make arguments: use --env-arg")
    p.set_defaults(func=cmd_play)


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
    close_within(env)
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
    if args.kwargs:
        print(
            f"note: lmgym play's positional KEY=VALUE is the old form: use --env-arg {args.kwargs[0]}", file=sys.stderr
        )
    env = with_tools(make_env(args.env_id, **parse_kwargs([*args.kwargs, *args.env_arg])), args.tools)
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


__all__ = ["add_parsers", "cmd_list", "cmd_play", "summary_line"]
