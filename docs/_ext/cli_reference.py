"""``{lmgym-cli}``: the CLI reference, made from ``lmgym.cli.build_parser`` at build time, so it
cannot drift from the flags: one section per command, its ``--help`` text as it prints."""

from __future__ import annotations

import argparse

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    from lmgym.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [("lmgym", parser), *((f"lmgym {name}", p) for name, p in sub.choices.items())]


class CliReference(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for name, parser in commands():
            parser.prog = name
            section = nodes.section(ids=[nodes.make_id(name)])
            section += nodes.title(text=name)
            text = parser.format_help()
            section += nodes.literal_block(text, text, language="text")
            out.append(section)
        return out


def setup(app):  # noqa: ANN001, ANN201 (Sphinx's extension entry point)
    app.add_directive("lmgym-cli", CliReference)
    return {"parallel_read_safe": True}
