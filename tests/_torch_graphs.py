"""Small synthetic molecule-like PyG graphs for the torch adapter tests (seeded, no globals)."""

from __future__ import annotations

import numpy as np


def molecules(
    n_graphs: int, seed: int = 0, *, min_nodes: int = 2, max_nodes: int = 12, radius: float = 1.6
):
    """PyG ``Data`` graphs: ``z`` [n], ``pos`` [n, 3], radius-graph ``edge_index`` [2, E] (both
    directions, no self-loops), ``edge_attr`` [E, 2], ``y`` [1, 3]."""
    import torch
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_graphs):
        n = int(rng.integers(min_nodes, max_nodes + 1))
        pos = rng.uniform(0, 2.5, size=(n, 3))
        d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        src, dst = np.nonzero((d < radius) & ~np.eye(n, dtype=bool))
        ei = np.stack([src, dst]).astype(np.int64)
        out.append(
            Data(
                z=torch.from_numpy(rng.integers(1, 10, size=n)),
                pos=torch.from_numpy(pos).float(),
                edge_index=torch.from_numpy(ei),
                edge_attr=torch.from_numpy(rng.normal(size=(ei.shape[1], 2))).float(),
                y=torch.from_numpy(rng.normal(size=(1, 3))).float(),
            )
        )
    return out


def sizes_of(graphs):
    import graphbatch as gb

    return gb.GraphSizes([g.num_nodes for g in graphs], [g.num_edges for g in graphs])
