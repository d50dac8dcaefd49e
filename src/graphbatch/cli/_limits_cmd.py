"""``graphbatch limits``: the (node, edge) pack limits at which ``pack-lpf`` packs best."""

from __future__ import annotations

import argparse
import inspect
import sys

from ..packing import search_limits
from ._common import load_sizes
from ._format import format_table, print_json

#: `search_limits`' own default resolution (the CLI's default is the library's).
DEFAULT_TOLERANCE = inspect.signature(search_limits).parameters["tolerance"].default


def _range(text: str) -> tuple[int, int]:
    try:
        lo, hi = text.split(":")
        return int(lo), int(hi)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected A:B with integers A <= B, got {text!r}"
        ) from None


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def add_parser(sub) -> None:
    p = sub.add_parser(
        "limits",
        help="search (node, edge) pack limits for tuple packing efficiency",
        description="Search the padded node and edge limits (incl. the padding node) at which "
        "pack-lpf packs best: the smallest limits whose harmonic mean of node and edge "
        "efficiency is within --tolerance of the best found (the range grows until that "
        "optimum is interior). Prints records best first; the first is packed exactly and "
        "equals `graphbatch plan --strategy pack-lpf` at its limits.",
    )
    p.add_argument("sizes", help="size table (.npz with int arrays n_node, n_edge)")
    p.add_argument("--max-graphs", type=int, help="padded graphs per pack (incl. 1 padding graph)")
    p.add_argument("--node-range", type=_range, metavar="A:B", help="padded node limits A..B")
    p.add_argument("--edge-range", type=_range, metavar="C:D", help="edge limits C..D")
    p.add_argument(
        "--grid", type=_positive, default=8, help="node limits per refinement interval (default 8)"
    )
    p.add_argument(
        "--no-refine", dest="refine", action="store_false", help="evaluate the scale ladder only"
    )
    p.add_argument(
        "--refine", dest="refine", action="store_true", help="refine around the optimum (default)"
    )
    p.set_defaults(refine=True)
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"harmonic-mean resolution (default {DEFAULT_TOLERANCE})",
    )
    p.add_argument(
        "--exact-points",
        type=_positive,
        default=4,
        help="candidates packed exactly on the whole table (default 4)",
    )
    p.add_argument(
        "--heuristic",
        default="product",
        help="product, sum, max, min, node or edge (default product)",
    )
    p.add_argument(
        "--method",
        choices=("auto", "histogram", "balanced"),
        default="auto",
        help="packer (default auto, as pack-lpf)",
    )
    p.add_argument(
        "--top", type=_positive, default=20, help="rows to print in the table (default 20)"
    )
    p.add_argument("--json", action="store_true", help="print all records as one JSON list")
    p.set_defaults(func=run)


def run(args) -> int:
    sizes = load_sizes(args.sizes)
    records = search_limits(
        sizes,
        max_graphs=args.max_graphs,
        node_range=args.node_range,
        edge_range=args.edge_range,
        grid=args.grid,
        refine=args.refine,
        heuristic=args.heuristic,
        method=args.method,
        tolerance=args.tolerance,
        exact_points=args.exact_points,
    )
    if args.json:
        print_json(list(records))
    else:
        print(records.summary())
        print(format_table(records[: args.top]))
    if not records.interior:
        print(
            f"warning: the optimum {records[0]['max_nodes']}/{records[0]['max_edges']} lies "
            "on the edge of the searched range; widen --node-range/--edge-range",
            file=sys.stderr,
        )
    return 0
