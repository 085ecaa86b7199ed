"""``lmgym docs``: the documentation site, built from ``docs/`` with Sphinx (``lmgym[docs]``) and
served on localhost, or only built (``--no-serve``)."""

from __future__ import annotations

import argparse
import functools
import http.server
import importlib.util
import pathlib
import subprocess
import sys
from typing import Any

from lmgym.cli.errors import RunError, UsageError
from lmgym.cli.options import add_output_flags

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "docs"
"""The site's sources: ``docs/`` of a source checkout (an editable install's)."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("docs", help="build the documentation site (Sphinx, strict) and serve it on localhost")
    add_output_flags(p, (None, "where the HTML goes (default: docs/_build/html)"), port=True)
    p.add_argument("--no-serve", action="store_true", help="build only")
    p.set_defaults(func=docs)


def build(out: pathlib.Path) -> None:
    """``sphinx-build -W`` of ``docs/`` into ``out``: a warning (a broken link, an undocumented
    public name) fails it, naming the problem."""
    if not (SOURCE / "conf.py").is_file():
        raise UsageError(f"no documentation sources at {SOURCE}: lmgym docs needs a source checkout (pip install -e .)")
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        raise UsageError("the docs need Sphinx and MyST: pip install 'lmgym[docs]'")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(SOURCE), str(out)]
    if subprocess.run(command).returncode != 0:
        raise RunError("the site did not build: the warnings above say where")


def docs(args: argparse.Namespace) -> None:
    out = pathlib.Path(args.out) if args.out else SOURCE / "_build" / "html"
    build(out)
    print(f"built: {out / 'index.html'}", file=sys.stderr)
    if args.no_serve:
        return
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    with http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler) as server:
        print(f"serving http://127.0.0.1:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
        server.serve_forever()


__all__ = ["add_parser", "build", "docs"]
