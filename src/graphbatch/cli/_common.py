"""Arguments shared by several subcommands: size-table input and budget options."""

from __future__ import annotations

import argparse
import dataclasses

from .._budget import Budget, estimate_budget
from .._errors import InputError
from .._random import seed_rng
from .._sizes import GraphSizes
from ..analysis import load_sizes

__all__ = ["add_budget_args", "budget_from_args", "load_sizes", "nonnegative_int", "positive_int"]


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return v

    return parse


#: argparse types for counts: integers >= 1 and >= 0.
positive_int = _int_at_least(1)
nonnegative_int = _int_at_least(0)


def add_budget_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("budget (padded batch shape)")
    g.add_argument(
        "--batch-size", type=int, help="graphs per padded batch, incl. one padding graph"
    )
    g.add_argument("--max-nodes", type=int, help="padded nodes per batch (incl. 1 padding node)")
    g.add_argument("--max-edges", type=int, help="padded edges per batch")
    g.add_argument("--max-graphs", type=int, help="padded graphs per batch (incl. 1 padding graph)")


def budget_from_args(args, sizes: GraphSizes, *, sample_size=1000, multiple=64) -> Budget | None:
    """A `Budget` from ``--max-*``; missing fields are estimated from ``--batch-size``.

    Returns ``None`` when no ``--max-*`` is given (the strategy then works from batch size).
    """
    given = {
        "n_node": args.max_nodes,
        "n_edge": args.max_edges,
        "n_graph": args.max_graphs,
    }
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        if args.batch_size is None:
            names = {"n_node": "nodes", "n_edge": "edges", "n_graph": "graphs"}
            flags = ", ".join("--max-" + names[k] for k in missing)
            raise InputError(f"give {flags} too, or --batch-size to estimate them from")
        est = estimate_budget(
            sizes,
            args.batch_size,
            rng=seed_rng(args.seed),
            sample_size=sample_size,
            multiple=multiple,
        )
        return dataclasses.replace(est, **{k: v for k, v in given.items() if v is not None})
    return Budget(**given)
