"""``graphbatch limits``: node/edge efficiency of tuple packing over a grid of limits."""

from __future__ import annotations

import argparse

from ..packing import search_limits
from ._common import load_sizes
from ._format import format_table, print_json


def _range(text: str) -> tuple[int, int]:
    try:
        lo, hi = text.split(":")
        return int(lo), int(hi)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B with integers A <= B, got {text!r}") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "limits",
        help="search (node, edge) pack limits for tuple packing efficiency",
        description="Evaluate longest-pack-first histogram packing over a grid of padded node and "
        "edge limits (incl. the padding node) and print node efficiency, edge efficiency and "
        "their harmonic mean, best first.",
    )
    p.add_argument("sizes", help="size table (.npz with int arrays n_node, n_edge)")
    p.add_argument("--max-graphs", type=int, help="padded graphs per pack (incl. 1 padding graph)")
    p.add_argument("--node-range", type=_range, metavar="A:B", help="padded node limits A..B")
    p.add_argument("--edge-range", type=_range, metavar="C:D", help="edge limits C..D")
    p.add_argument("--grid", type=int, default=16, help="points per axis (default 16)")
    p.add_argument("--refine", action="store_true", help="add a finer grid around the best point")
    p.add_argument("--heuristic", default="product",
                   help="product, sum, max, min, node or edge (default product)")
    p.add_argument("--top", type=int, default=20, help="rows to print in the table (default 20)")
    p.add_argument("--json", action="store_true", help="print all records as one JSON list")
    p.set_defaults(func=run)


def run(args) -> int:
    sizes = load_sizes(args.sizes)
    records = search_limits(sizes, max_graphs=args.max_graphs, node_range=args.node_range,
                            edge_range=args.edge_range, grid=args.grid, refine=args.refine,
                            heuristic=args.heuristic)
    if args.json:
        print_json(records)
    else:
        print(format_table(records[: max(args.top, 1)]))
    return 0
