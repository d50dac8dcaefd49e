"""``graphbatch analyze``: the dataset's size statistics (tuple-packing paper, Table 1)."""

from __future__ import annotations

from ._common import load_sizes
from ._format import format_table, print_json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="size statistics of a dataset (Table 1: padding efficiency, kurtosis, quantiles)",
        description="Size statistics of a dataset: graphs, max nodes/edges, distinct (nodes, "
        "edges) pairs, node/edge efficiency when every graph is padded to the largest and the "
        "potential speedup (1/efficiency) - Table 1 of the tuple-packing paper - plus mean, std, "
        "quantiles, skewness and excess kurtosis.",
    )
    p.add_argument("sizes", help="size table (.npz with n_node, n_edge[, n_bytes]) or graph store")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis import describe

    summary = describe(load_sizes(args.sizes))
    if args.json:
        print_json({"source": str(args.sizes), **summary.as_dict()})
    else:
        cols = ["metric"] + [c.name for c in summary.columns()]
        print(format_table(summary.table_rows(), cols))
    return 0
