"""The ``graphbatch`` command line: subcommands over the library's public API.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``; the parser's
``func(args) -> int`` runs it. Errors from bad input exit with status 2 and one line on stderr:
``graphbatch._errors.USER_ERRORS`` (the library's own errors, ``ValueError``, ``OSError``).
Anything else -- a ``KeyError``, ``AttributeError``, ``ZeroDivisionError``, a plain
``TypeError`` -- is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .._errors import USER_ERRORS

__all__ = ["main", "build_parser"]

#: Subcommand modules, in the order ``graphbatch --help`` lists them.
_COMMANDS = (
    "_plan_cmd",
    "_analyze_cmd",
    "_compare_cmd",
    "_report_cmd",
    "_demo_cmd",
    "_data_cmd",
    "_limits_cmd",
    "_bandwidth_cmd",
    "_bench_cmd",
    "_tune_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="graphbatch",
        description="Fixed-shape, memory-balanced batching of many small graphs.",
    )
    parser.add_argument("--version", action="version", version=f"graphbatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        print(f"graphbatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphbatch: interrupted", file=sys.stderr)
        return 130
