"""Hypothesis strategies for size tables (shared by the property-based tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import graphbatch as gb


@st.composite
def size_tables(
    draw,
    min_graphs: int = 1,
    max_graphs: int = 300,
    max_nodes: int = 60,
    max_edges: int = 400,
    with_bytes: bool = False,
) -> gb.GraphSizes:
    n = draw(st.integers(min_graphs, max_graphs))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, max_nodes + 1, size=n)
    if draw(st.booleans()):  # heavy tail
        nodes = np.minimum(max_nodes, (rng.pareto(1.5, size=n) * 4 + 1).astype(np.int64))
    edges = np.minimum(max_edges, (nodes * rng.uniform(0, 4, size=n)).astype(np.int64))
    nbytes = nodes * 100 + edges * 10 if with_bytes else None
    return gb.GraphSizes(nodes, edges, nbytes)
