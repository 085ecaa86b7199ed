"""``lmgym rescore RUN --reward module:function``: a run's recorded episodes scored by a new
reward function (``lmgym.rescore``), written beside the old rewards; prints how success and
mean return change."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lmgym.cli.errors import RunError, UsageError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("rescore", help="score a run's recorded episodes again with a new reward function")
    p.add_argument("run_dir", help="a run directory (lmgym train --out, or learn's log_dir)")
    p.add_argument(
        "--reward",
        required=True,
        metavar="MODULE:FUNCTION",
        help="reward_fn(prompt, completion, info) -> float, as Prompt-v0 takes (or path/to/file.py:function)",
    )
    p.add_argument("--name", default=None, help="the rescore's name (default: the function's)")
    p.add_argument("--timeout", type=float, default=None, help="seconds one call may take (then: no reward)")
    p.set_defaults(func=cmd_rescore)


def cmd_rescore(args: argparse.Namespace) -> None:
    from lmgym.rescore import load_function, rescore

    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout}")
    try:
        fn = load_function(args.reward)
    except ValueError as e:
        raise UsageError(str(e)) from e
    except Exception as e:  # noqa: BLE001 (the user's module failed on import: one line)
        raise UsageError(f"--reward {args.reward!r}: importing it raised {type(e).__name__}: {e}") from e
    name = args.name or args.reward.rpartition(":")[2]
    try:
        path, changes, skipped = rescore(args.run_dir, fn, name, args.timeout)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e
    except RuntimeError as e:
        raise RunError(str(e)) from e
    for what in skipped:
        print(f"skipped: {what}", file=sys.stderr)
    print(f"rescored with {args.reward}: {path}")
    print(f"{'episodes':<10} {'count':>8}   {'success (old -> new)':<20}   mean return (old -> new)")
    for change in changes:
        print(change)
    print(f"lmgym view {args.run_dir} shows both")


__all__ = ["add_parser", "cmd_rescore"]
