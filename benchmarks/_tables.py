"""Size tables for benchmarks: the shipped QM9 radius-6 Å table, resampled to any size."""

from __future__ import annotations

from importlib import resources

import numpy as np

import graphbatch as gb

QM9_TABLE = "qm9_radius6_sizes.npz"


def qm9_like_sizes(n: int, seed: int = 0) -> tuple[gb.GraphSizes, str]:
    """``n`` graphs drawn with replacement from QM9's radius-6 Å size table (shipped in
    ``graphbatch/data``). Returns the table and a description of its source."""
    path = resources.files("graphbatch") / "data" / QM9_TABLE
    base = gb.GraphSizes.load(str(path))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(base), size=n)
    return base.subset(idx), f"QM9 radius-6 Å sizes ({len(base):,} molecules) resampled to {n:,}"


def describe(sizes: gb.GraphSizes) -> str:
    return (f"{len(sizes):,} graphs, nodes mean {sizes.n_node.mean():.1f} max {sizes.n_node.max()}, "
            f"edges mean {sizes.n_edge.mean():.1f} max {sizes.n_edge.max()}")
