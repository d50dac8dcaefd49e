"""Graph fixtures for the low-bandwidth tests: random banded graphs with node data.

Real code graphs come from ``graphbatch.datasets`` (via ``graphbatch.lowband._sources``).
"""

from __future__ import annotations

import numpy as np

from graphbatch.lowband import EdgeGraphs


def random_banded(
    rng: np.random.Generator,
    n: int,
    band: int,
    n_edge: int,
    num_edge_types: int = 2,
    shuffle: bool = True,
):
    """One graph with ``n`` nodes whose edges satisfy ``|i-j| <= band`` before the optional
    random relabelling. Returns ``(n, edge_index, edge_type)``."""
    if n == 0:
        return 0, np.zeros((2, 0), np.int64), np.zeros(0, np.int64)
    s = rng.integers(0, n, n_edge)
    r = np.clip(s + rng.integers(-band, band + 1, n_edge), 0, n - 1)
    if shuffle:
        relabel = rng.permutation(n)
        s, r = relabel[s], relabel[r]
    return n, np.stack([s, r]), rng.integers(0, num_edge_types, n_edge)


def random_collection(
    seed: int,
    count: int,
    max_nodes: int = 80,
    max_band: int = 12,
    num_edge_types: int = 2,
    shuffle: bool = True,
) -> EdgeGraphs:
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(count):
        n = int(rng.integers(1, max_nodes + 1))
        band = int(rng.integers(0, max_band + 1))
        graphs.append(
            random_banded(rng, n, band, int(rng.integers(0, 3 * n + 1)), num_edge_types, shuffle)
        )
    g = EdgeGraphs.from_graphs(graphs, num_edge_types=num_edge_types)
    return g.replace(
        node_data={"x": rng.normal(size=(g.num_nodes, 3)), "label": rng.integers(0, 5, g.num_nodes)}
    )
