"""``graphbatch bandwidth``: RCM bandwidth statistics of a graph dataset (the paper's Figure 1)."""

from __future__ import annotations

from pathlib import Path

from .._errors import InputError
from .._io import check_output_path
from ..analysis import input_files
from ._common import nonnegative_int, positive_int
from ._format import format_table, print_json

_HELP_INPUT = (
    "graphs: an .h5 graph store, an EdgeGraphs .npz, a directory of .py files or one "
    ".py file (functions become code graphs)"
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bandwidth",
        help="RCM bandwidth statistics (share below 128/256/512/1024, N/B ratios)",
        description="Reorder every graph by Reverse Cuthill-McKee on its symmetrised adjacency "
        "and report bandwidths before/after, the share of graphs below each bound and the N/B "
        "distribution; optionally the edge coverage of block sizes S.",
    )
    p.add_argument("input", help=_HELP_INPUT)
    p.add_argument(
        "--bounds",
        type=positive_int,
        nargs="+",
        default=[128, 256, 512, 1024],
        help="bandwidth bounds B for the share of graphs with bandwidth < B",
    )
    p.add_argument(
        "--block-sizes",
        type=positive_int,
        nargs="*",
        default=[],
        help="block sizes S: share of graphs/edges covered in supergraphs of K*S",
    )
    p.add_argument("--num-blocks", type=positive_int, default=16, help="K, blocks per supergraph")
    p.add_argument(
        "--limit", type=nonnegative_int, help="at most this many graphs (directory input)"
    )
    p.add_argument(
        "--out",
        help="write the reordered graphs: an EdgeGraphs .npz, or (for an "
        ".h5 input) a new .h5 store with node fields permuted",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def load_graphs(path: str, limit: int | None = None):
    """`EdgeGraphs` from an ``.npz``, an ``.h5`` store, or ``.py`` sources (code graphs)."""
    from ..lowband import EdgeGraphs

    src = Path(path)
    if not src.exists():
        raise FileNotFoundError(f"input {path!r} does not exist")
    if src.is_file() and src.suffix == ".npz":
        graphs = EdgeGraphs.load(src)
    elif src.is_file() and src.suffix in (".h5", ".hdf5"):
        from ..lowband import graphs_from_store

        graphs = graphs_from_store(src, limit=limit)
    elif src.is_dir() or src.suffix == ".py":
        from ..lowband import graphs_from_python

        graphs = graphs_from_python(src, limit=limit)
    else:
        raise InputError(
            f"cannot read graphs from {path!r}: expected .npz, .h5 or .py files / a directory"
        )
    if limit is not None and limit < len(graphs):
        graphs = graphs.subset(range(limit))
    return graphs


def run(args) -> int:
    from ..lowband import apply_reordering, band_coverage, bandwidth_summary, reduce_bandwidth

    if args.out is not None:
        check_output_path(
            args.out,
            input_files(args.input),
            suffixes=(".npz", ".h5", ".hdf5"),
            what="reordered graphs",
        )
    out_h5 = args.out is not None and Path(args.out).suffix in (".h5", ".hdf5")
    if out_h5 and Path(args.input).suffix not in (".h5", ".hdf5"):
        raise InputError(
            f"--out {args.out!r}: writing a reordered .h5 store needs an .h5 input; "
            "use an .npz output for other inputs"
        )
    if out_h5 and args.limit is not None:
        raise InputError(
            "--limit cannot be combined with a reordered .h5 output (it copies the whole store)"
        )
    graphs = load_graphs(args.input, args.limit)
    reorder = reduce_bandwidth(graphs)
    if out_h5:
        from ..lowband import reorder_store

        reorder_store(args.input, args.out)
    summary = bandwidth_summary(graphs.n_node, reorder.before, reorder.after, args.bounds)
    coverage = []
    if args.block_sizes or (args.out and not out_h5):
        reordered = apply_reordering(graphs, reorder)
        if args.out and not out_h5:
            reordered.save(args.out)
        if args.block_sizes:
            coverage = band_coverage(reordered, args.block_sizes, args.num_blocks)
    if args.json:
        print_json(
            {
                "input": str(args.input),
                "edges": graphs.num_edges,
                "edge_types": graphs.num_edge_types,
                **summary.as_dict(),
                "coverage": coverage,
            }
        )
        return 0
    d = summary.as_dict()
    head = [{"metric": k, "value": v} for k, v in d.items() if not isinstance(v, (dict, list))]
    head.insert(2, {"metric": "num_edges", "value": graphs.num_edges})
    print(format_table(head))
    print()
    print(
        format_table(
            [
                {
                    "bound B": t,
                    "share bw < B (RCM)": d["share_below"][t],
                    "share bw < B (original)": d["share_below_before"][t],
                    "share nodes < B": d["share_nodes_below"][t],
                }
                for t in args.bounds
            ]
        )
    )
    print()
    edges = summary.ratio_bin_edges
    print(
        format_table(
            [
                {"N/B from": lo, "to": hi if hi != float("inf") else "inf", "graphs": c}
                for lo, hi, c in zip(edges[:-1], edges[1:], summary.ratio_counts, strict=True)
            ]
        )
    )
    if coverage:
        print()
        print(format_table(coverage))
    return 0
