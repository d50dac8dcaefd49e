"""The demo: default size table -> strategy comparison -> ``report.html``, with progress.

Run ``graphbatch demo`` or ``python -m graphbatch.demo [--sizes FILE] [--out report.html]``.
By default the QM9 (radius 6 Å) sizes are built from the installed ``qm9pack`` data (the
``make demo`` environment installs it) and checked against the size table shipped in
``graphbatch/data``; without qm9pack, or with ``--shipped``, the shipped table is used. A build
without that table falls back to a seeded synthetic QM9-like table, labelled as such everywhere.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from ._errors import USER_ERRORS, InputError
from ._io import check_output_path
from ._sizes import GraphSizes

if TYPE_CHECKING:
    from .analysis import Variant

__all__ = ["DEFAULT_TABLE", "default_sizes", "synthetic_qm9_like", "main", "add_arguments", "run"]

#: Package-relative path of the shipped default size table.
DEFAULT_TABLE = "data/qm9_radius6_sizes.npz"


def synthetic_qm9_like(num_graphs: int = 130_831, *, seed: int = 0) -> GraphSizes:
    """A seeded stand-in for QM9 radius graphs (not real data): nodes ~ round(Normal(18, 3))
    clipped to [3, 29]; directed edges = round(n (n - 1) f) with f ~ Beta(20, 2) (most pairs
    within the cutoff)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    n = np.clip(np.round(rng.normal(18.0, 3.0, num_graphs)), 3, 29).astype(np.int64)
    e = np.round(n * (n - 1) * rng.beta(20.0, 2.0, num_graphs)).astype(np.int64)
    return GraphSizes(n, e)


def default_sizes() -> tuple[GraphSizes, str]:
    """The default size table and a description of where it came from."""
    ref = resources.files("graphbatch").joinpath(DEFAULT_TABLE)
    if ref.is_file():
        with resources.as_file(ref) as path:
            return GraphSizes.load(path), "QM9, radius 6 Å (size table shipped with graphbatch)"
    return (
        synthetic_qm9_like(),
        "SYNTHETIC QM9-like table (this build ships no QM9 size table; pass --sizes for real data)",
    )


def build_qm9_sizes(say: Callable[[str], None]) -> GraphSizes:
    """QM9 radius-6 Å graph sizes built from the installed ``qm9pack`` data (about 20-40 s)."""
    from .datasets import QM9_NUM_MOLECULES, qm9_graphs

    nodes, edges, done = [], [], 0
    for part in qm9_graphs("radius", cutoff=6.0, chunk_size=16384):
        nodes.append(part.n_node)
        edges.append(part.n_edge)
        done += len(part.n_node)
        say(f"building QM9 radius-6 Å graphs: {done:,}/{QM9_NUM_MOLECULES:,} molecules")
    return GraphSizes(np.concatenate(nodes), np.concatenate(edges))


def qm9pack_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("qm9pack") is not None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", help="size table or graph store to use instead of the default")
    p.add_argument(
        "--shipped",
        action="store_true",
        help="use the shipped QM9 size table instead of building it from qm9pack",
    )
    p.add_argument("--batch-size", type=int, default=32, help="graphs per batch (default 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--bench",
        nargs="+",
        action="extend",
        default=[],
        metavar="RESULTS.json",
        help="benchmark result files to include in the report",
    )
    p.add_argument("--dpi", type=int, default=100, help="figure resolution (default 100)")
    p.add_argument("--out", default="report.html", help="report to write (default report.html)")


def run(args: argparse.Namespace) -> int:
    """Load sizes, compare every strategy, write the report; progress on stderr."""
    if args.sizes and args.shipped:
        raise InputError(f"--sizes {args.sizes} and --shipped each name the size table; give one")
    from .analysis import compare_strategies, input_files, load_bench, load_sizes

    check_output_path(
        args.out, [*input_files(args.sizes), *args.bench], suffixes=(".html", ".htm"), what="report"
    )  # before importing matplotlib
    from .report import build_report, comparison_table, write_report

    t0 = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[demo {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    say("loading sizes")
    if args.sizes:
        sizes, source = load_sizes(args.sizes), str(args.sizes)
    elif not args.shipped and qm9pack_installed():
        sizes = build_qm9_sizes(say)
        shipped, _ = default_sizes()
        same = shipped == sizes
        source = "QM9, radius 6 Å, built from qm9pack" + (
            " (identical to the shipped size table)"
            if same
            else " (DIFFERS from the shipped size table)"
        )
    else:
        sizes, source = default_sizes()
    say(f"{len(sizes):,} graphs from {source}")
    bench = load_bench(args.bench) if args.bench else None

    def step(i: int, n: int, variant: Variant) -> None:
        say(f"planning {i + 1}/{n}: {variant.label}")

    comparison = compare_strategies(sizes, args.batch_size, seed=args.seed, progress=step)
    text = build_report(
        sizes,
        source=source,
        batch_size=args.batch_size,
        seed=args.seed,
        comparison=comparison,
        bench=bench,
        progress=lambda m: say(f"report: {m}"),
        dpi=args.dpi,
    )
    path = write_report(args.out, text)
    say("done")
    print(f"Strategies on {len(sizes):,} graphs from {source}, batch size {args.batch_size}:")
    print(comparison_table(comparison))
    print(f"report: {path.resolve()}")
    return 0 if all(r.ok for r in comparison.results) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphbatch.demo", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except USER_ERRORS as exc:
        print(f"graphbatch demo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
