"""``graphbatch compare``: every registered strategy on one budget, one table."""

from __future__ import annotations

import sys

from ..report import comparison_table
from ._common import load_sizes
from ._format import print_json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="run every registered strategy on one budget and print one table",
        description="Plan one epoch with every registered strategy (and variants such as buckets "
        "with K = 2 and 4) for one batch size; strategies that take a node/edge budget share the "
        "one estimated from --batch-size (Algorithm 1). Columns: node/edge efficiency, batches vs "
        "the lower bound, distinct shapes, graphs per batch, max batch cost, plan time.",
    )
    p.add_argument("sizes", help="size table (.npz with n_node, n_edge[, n_bytes]) or graph store")
    p.add_argument(
        "--batch-size",
        type=int,
        required=True,
        help="graphs per padded batch, incl. one padding graph",
    )
    p.add_argument("--world-size", type=int, default=1, help="ranks per step (distributed plans)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--on-oversize",
        choices=("error", "skip", "own_batch"),
        default="own_batch",
        help="policy for graphs larger than the budget (default: own_batch)",
    )
    p.add_argument(
        "--limits",
        action="store_true",
        help="also run the limit search (as `graphbatch limits --max-graphs "
        "BATCH_SIZE`) and print its optimum, range and packing efficiency",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis import compare_strategies

    sizes = load_sizes(args.sizes)
    comparison = compare_strategies(
        sizes,
        args.batch_size,
        world_size=args.world_size,
        seed=args.seed,
        on_oversize=args.on_oversize,
        search_limits=args.limits,
    )
    if args.json:
        print_json({"source": str(args.sizes), **comparison.as_dict()})
    else:
        print(comparison_table(comparison))
    failed = [r.label for r in comparison.results if not r.ok]
    if failed:
        print(
            f"graphbatch compare: {len(failed)} strategy run(s) failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0
