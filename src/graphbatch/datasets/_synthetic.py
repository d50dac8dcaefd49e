"""Seeded synthetic size tables and random graphs for tests and benchmarks."""

from __future__ import annotations

import numpy as np

from .._errors import InputError, InputTypeError
from .._sizes import GraphSizes
from .._validate import as_positive_int
from ._graphs import GraphArrays

__all__ = ["SIZE_DISTRIBUTIONS", "synthetic_graphs", "synthetic_sizes"]

#: Node-count distributions understood by `synthetic_sizes`.
SIZE_DISTRIBUTIONS = ("normal", "lognormal", "heavy")


def _rng(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise InputTypeError(f"rng must be a numpy Generator or a non-negative int seed, got {rng!r}")


def synthetic_sizes(
    n_graph: int,
    distribution: str = "lognormal",
    *,
    rng: np.random.Generator | int,
    mean_nodes: float = 20.0,
    spread: float = 0.5,
    min_nodes: int = 1,
    max_nodes: int = 10_000,
    mean_degree: float = 4.0,
    degree_spread: float = 0.25,
) -> GraphSizes:
    """``n_graph`` random (n_node, n_edge) pairs.

    Nodes: ``normal`` (mean ``mean_nodes``, std ``spread * mean_nodes``), ``lognormal`` (median
    ``mean_nodes``, log-std ``spread``) or ``heavy`` (Pareto tail: ``mean_nodes * 0.5 *
    (1 + Lomax(a))`` with tail index ``a = 1 + 1/spread``, so smaller ``spread`` = lighter tail),
    rounded and clipped to ``[min_nodes, max_nodes]``. Edges: ``n_node * mean_degree`` times a
    lognormal factor of log-std ``degree_spread``, rounded, clipped to ``[0, n(n-1)]``.
    Deterministic for a given ``rng`` (a Generator or an int seed).
    """
    n_graph = as_positive_int(n_graph, "n_graph")
    gen = _rng(rng)
    if distribution == "normal":
        nodes = gen.normal(mean_nodes, spread * mean_nodes, n_graph)
    elif distribution == "lognormal":
        nodes = mean_nodes * np.exp(gen.normal(0.0, spread, n_graph))
    elif distribution == "heavy":
        nodes = mean_nodes * 0.5 * (1.0 + gen.pareto(1.0 + 1.0 / spread, n_graph))
    else:
        raise InputError(
            f"unknown size distribution {distribution!r}; choose one of {SIZE_DISTRIBUTIONS}"
        )
    n_node = np.clip(np.rint(nodes), min_nodes, max_nodes).astype(np.int64)
    factor = np.exp(gen.normal(0.0, degree_spread, n_graph))
    n_edge = np.rint(n_node * mean_degree * factor).astype(np.int64)
    n_edge = np.clip(n_edge, 0, n_node * (n_node - 1))
    return GraphSizes(n_node, n_edge)


def synthetic_graphs(
    sizes: GraphSizes,
    *,
    rng: np.random.Generator | int,
    node_dim: int = 8,
    n_targets: int = 1,
    symmetric: bool = False,
) -> GraphArrays:
    """Random graphs with exactly ``sizes``: uniform random directed edges without self loops
    (repeats possible), node features ``x`` float32 ``[n, node_dim]``, ``pos`` float32 ``[n, 3]``,
    targets ``y`` float32 ``[n_targets]`` per graph. Deterministic for a given ``rng``.

    ``symmetric=True``: edges come in reverse pairs, as in a radius graph -- edge ``2k + 1`` of
    every graph is edge ``2k`` reversed (what SchNet's ``pair_edges`` needs); every graph needs
    an even edge count."""
    gen = _rng(rng)
    nn, ne = sizes.n_node, sizes.n_edge
    if (ne > nn * (nn - 1)).any():
        g = int(np.flatnonzero(ne > nn * (nn - 1))[0])
        raise InputError(
            f"graph {g} has {ne[g]} edges, more than {nn[g]}*({nn[g]}-1) without self loops"
        )
    if symmetric and (ne % 2).any():
        g = int(np.flatnonzero(ne % 2)[0])
        raise InputError(
            f"graph {g} has {ne[g]} edges: symmetric graphs (reverse pairs) need even counts"
        )
    n_of_edge = np.repeat(nn, ne // 2 if symmetric else ne)
    src = np.floor(gen.random(n_of_edge.shape[0]) * n_of_edge).astype(np.int64)
    step = 1 + np.floor(gen.random(n_of_edge.shape[0]) * (n_of_edge - 1)).astype(np.int64)
    dst = (src + step) % np.maximum(n_of_edge, 1)
    if symmetric:  # (i, j) then (j, i): pairs stay adjacent inside each graph
        src, dst = np.stack([src, dst], 1).reshape(-1), np.stack([dst, src], 1).reshape(-1)
    total = int(nn.sum())
    return GraphArrays(
        n_node=nn,
        n_edge=ne,
        edge_index=np.stack([src, dst]).astype(np.int32),
        node={
            "x": gen.standard_normal(
                (total, as_positive_int(node_dim, "node_dim")), dtype=np.float32
            ),
            "pos": gen.standard_normal((total, 3), dtype=np.float32),
        },
        graph={
            "y": gen.standard_normal(
                (nn.shape[0], as_positive_int(n_targets, "n_targets")), dtype=np.float32
            )
        },
    )
