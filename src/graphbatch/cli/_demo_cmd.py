"""``graphbatch demo``: default size table -> strategy comparison -> report.html."""

from __future__ import annotations


def add_parser(sub) -> None:
    from ..demo import add_arguments

    p = sub.add_parser(
        "demo",
        help="compare every strategy on the default size table and write report.html",
        description="Compare every strategy on the default size table (QM9, radius 6 Å, when "
        "shipped; else a labelled synthetic stand-in) and write a self-contained HTML report.",
    )
    add_arguments(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..demo import run

    return run(args)
