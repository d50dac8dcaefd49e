"""The ``graphbatch`` argparse parser for sphinx-argparse, with its help texts made literal.

sphinx-argparse reads help strings as reStructuredText, but ours are plain text for a terminal
(``K*S``, ``lpf|spf``, ``--max-*``): this returns ``graphbatch.cli.build_parser()`` with the
characters reStructuredText would interpret escaped, so the page shows what ``--help`` prints.
"""

from __future__ import annotations

import argparse
import re

from graphbatch.cli import build_parser

_SPECIAL = re.compile(r"([\\*`|]|_(?=\W|$))")


def _escape(text: str | None) -> str | None:
    return None if text is None else _SPECIAL.sub(r"\\\1", text)


def _escape_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = _escape(parser.description)
    parser.epilog = _escape(parser.epilog)
    for group in parser._action_groups:
        group.description = _escape(group.description)
    for action in parser._actions:
        if action.help not in (None, argparse.SUPPRESS):
            action.help = _escape(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = _escape(choice.help)
            for sub in action.choices.values():
                _escape_parser(sub)


def parser() -> argparse.ArgumentParser:
    """``graphbatch.cli.build_parser()`` with reStructuredText-safe help texts."""
    p = build_parser()
    _escape_parser(p)
    return p
