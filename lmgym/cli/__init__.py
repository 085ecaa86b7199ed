"""The ``lmgym`` command: ``list``, ``play``, ``view``, ``train``, ``eval``, ``doctor``, ``rescore``,
``export`` and ``docs``.

One module per command (``envs``: list and play; ``view``; ``train``; ``evaluate``; ``export``),
``options`` for what they share (``UsageError``: bad input, one line, exit status 2),
``rundir`` for the run directory, ``session`` for the agent and envs of train and eval.
Nothing in the library imports this package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import lmgym
from lmgym.cli import compare, docs, doctor, envs, evaluate, export, rescore, train, view
from lmgym.cli.errors import RunError, UsageError
from lmgym.cli.options import import_env_module
from lmgym.cli.spec import parse_kwargs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmgym", description=(lmgym.__doc__ or "lmgym").splitlines()[0])
    parser.add_argument("--version", action="version", version=lmgym.__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    envs.add_parsers(sub)
    view.add_parser(sub)
    train.add_parser(sub)
    evaluate.add_parser(sub)
    doctor.add_parser(sub)
    rescore.add_parser(sub)
    export.add_parser(sub)
    compare.add_parser(sub)
    docs.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "env_id", None):
            args.env_id, args.env_module = import_env_module(args.env_id)
        args.func(args)
    except UsageError as e:
        print(f"lmgym {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"lmgym {args.command}: {e.said}: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print(f"lmgym {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `lmgym list | head`
        return 0
    return 0


__all__ = ["RunError", "UsageError", "build_parser", "main", "parse_kwargs"]
