"""``.. ustack-cli::``: the ``ustack`` command line's help, read from its argparse parser at build time.

The page then always shows the options the code has: a renamed or removed
subcommand changes the page, and a broken parser fails the build.
"""

from __future__ import annotations

import argparse
import os

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _help_text(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: fix the width for a stable page
    try:
        return parser.format_help()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


class UstackCli(SphinxDirective):
    """One rubric and one literal block per subcommand, in the parser's order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from ustack.tools.cli import build_parser

        parser = build_parser()
        out: list[nodes.Node] = [nodes.literal_block(text=_help_text(parser), language="text")]
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:
            for name, sub in action.choices.items():
                section = nodes.section(ids=[f"ustack-{name}"], names=[f"ustack {name}"])
                section += nodes.title(text=f"ustack {name}")
                section += nodes.literal_block(text=_help_text(sub), language="text")
                out.append(section)
        return out


def setup(app):
    app.add_directive("ustack-cli", UstackCli)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
