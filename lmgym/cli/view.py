"""``lmgym view``: a run's HTML report, written and optionally served on 127.0.0.1."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lmgym.cli.options import UsageError, add_output_flags


def add_parser(sub: Any) -> None:
    p = sub.add_parser("view", help="write a run's HTML report (learning curve, config, episodes token by token)")
    p.add_argument("run_dir", help="a run directory (lmgym train --out, or learn's log_dir)")
    add_output_flags(p, (None, "where to write the report (default: RUN_DIR/report.html)"), port=True)
    p.add_argument("--serve", action="store_true", help="serve it on 127.0.0.1 after writing it")
    p.set_defaults(func=cmd_view)


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


__all__ = ["add_parser", "cmd_view"]
