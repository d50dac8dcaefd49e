"""``graphbatch report``: one self-contained HTML page of figures and tables."""

from __future__ import annotations

import sys

from .._io import check_output_path
from ._common import load_sizes


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report (histograms, limits, strategies, benchmarks)",
        description="Write one HTML page (figures embedded, no network needed to view it): size "
        "histograms, the 2-D (nodes, edges) histogram, efficiency vs packing limits, the "
        "strategy comparison, graphs per batch and, with --bench, timing, compilation and memory "
        "figures, and with --tune the tuning ranking and fitted cost model. Needs matplotlib.",
    )
    p.add_argument("sizes", help="size table (.npz with n_node, n_edge[, n_bytes]) or graph store")
    p.add_argument(
        "--bench",
        nargs="+",
        action="extend",
        default=[],
        metavar="RESULTS.json",
        help="benchmark result files (JSON lists of records), repeatable",
    )
    p.add_argument(
        "--tune",
        metavar="RESULT.json",
        help="a tune result (graphbatch tune --result): ranking, validation and the "
        "fitted cost model against its probes",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="batch size of the strategy comparison (default 32)",
    )
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dpi", type=int, default=100, help="figure resolution (default 100)")
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis import input_files, load_bench

    check_output_path(
        args.out,
        [*input_files(args.sizes), *args.bench, *([args.tune] if args.tune else [])],
        suffixes=(".html", ".htm"),
        what="report",
    )  # before importing matplotlib
    from ..report import build_report, write_report

    sizes = load_sizes(args.sizes)
    bench = load_bench(args.bench) if args.bench else None
    tune = None
    if args.tune:
        from ..tuning import TuneResult

        tune = TuneResult.load(args.tune)

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[report] {msg}", file=sys.stderr, flush=True)

    text = build_report(
        sizes,
        source=str(args.sizes),
        batch_size=args.batch_size,
        world_size=args.world_size,
        seed=args.seed,
        bench=bench,
        progress=progress,
        dpi=args.dpi,
        tune=tune,
    )
    path = write_report(args.out, text)
    print(path)
    return 0
