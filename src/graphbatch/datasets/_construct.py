"""Geometric graph construction for many point clouds at once (fully connected, radius, kNN).

All functions take the positions of ``G`` graphs concatenated (``pos [N, 3]``) with their node
counts (``n_node [G]``) and return directed edges **without self loops**, grouped by graph and
sorted by (source, target) inside each graph, with *local* node indices and the Euclidean edge
length in the units of ``pos`` (Å for molecules). They are vectorised: one `scipy.spatial.cKDTree`
serves all graphs of a call, after each graph is moved to its own cell of a 3-D grid whose spacing
exceeds the cutoff, so no pair between two graphs can be found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError
from .._validate import as_count_array, as_positive_int

__all__ = ["EdgeSet", "GRAPH_METHODS", "full_edges", "radius_edges", "knn_edges", "build_edges"]

#: Construction methods understood by `build_edges` (and the CLI's ``--graph``).
GRAPH_METHODS = ("radius", "knn", "full")


@dataclass(frozen=True)
class EdgeSet:
    """Edges of ``G`` graphs: ``edge_index`` int64 ``[2, E]`` (local indices, row 0 = source),
    ``dist`` float64 ``[E]`` (edge length), ``n_edge`` int64 ``[G]`` (edges per graph)."""

    edge_index: np.ndarray
    dist: np.ndarray
    n_edge: np.ndarray


def _check(pos: ArrayLike, n_node: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    pos = np.asarray(pos, dtype=np.float64)
    nn = as_count_array(n_node, "n_node")
    if pos.ndim != 2 or pos.shape[1] != 3:
        raise InputError(f"pos must have shape [N, 3], got {pos.shape}")
    if pos.shape[0] != int(nn.sum()):
        raise InputError(f"pos has {pos.shape[0]} rows but n_node sums to {int(nn.sum())}")
    if not np.isfinite(pos).all():
        raise InputError("pos contains NaN or infinite coordinates")
    return pos, nn


def _finish(src: np.ndarray, dst: np.ndarray, pos: np.ndarray, nn: np.ndarray) -> EdgeSet:
    """Global (src, dst) pairs -> sorted local `EdgeSet` with lengths."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    graph_of_node = np.repeat(np.arange(nn.shape[0]), nn)
    first = np.zeros(nn.shape[0], dtype=np.int64)
    np.cumsum(nn[:-1], out=first[1:])
    g = graph_of_node[src]
    dist = np.linalg.norm(pos[src] - pos[dst], axis=1)
    local = np.stack([src - first[g], dst - first[g]]).astype(np.int64)
    n_edge = np.bincount(g, minlength=nn.shape[0]).astype(np.int64)
    return EdgeSet(edge_index=local, dist=dist, n_edge=n_edge)


def _grid_layout(
    pos: np.ndarray, nn: np.ndarray, margin: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Shift each graph into its own cell of a cubic grid: nodes of different graphs end up more
    than ``2 * margin`` apart (``margin=None``: more than the largest graph extent apart, so every
    node's own graph is nearer than any other graph).

    Returns shifted positions and the graph id of each node.
    """
    G = nn.shape[0]
    graph_of_node = np.repeat(np.arange(G), nn)
    lo = np.full((G, 3), np.inf)
    hi = np.full((G, 3), -np.inf)
    np.minimum.at(lo, graph_of_node, pos)
    np.maximum.at(hi, graph_of_node, pos)
    nonempty = nn > 0
    extent = float((hi[nonempty] - lo[nonempty]).max()) if nonempty.any() else 0.0
    if margin is None:
        margin = extent
    spacing = extent + 2.0 * margin + 1.0
    side = max(1, int(np.ceil(G ** (1.0 / 3.0))))
    cell = (
        np.stack(
            [np.arange(G) % side, (np.arange(G) // side) % side, np.arange(G) // (side * side)],
            axis=1,
        ).astype(np.float64)
        * spacing
    )
    shift = cell - np.where(np.isfinite(lo), lo, 0.0)
    return pos + shift[graph_of_node], graph_of_node


def full_edges(pos: ArrayLike, n_node: ArrayLike) -> EdgeSet:
    """All ordered pairs ``(i, j)``, ``i != j``, inside each graph: ``n * (n - 1)`` edges."""
    pos, nn = _check(pos, n_node)
    sq = nn * nn
    total = int(sq.sum())
    pair_graph = np.repeat(np.arange(nn.shape[0]), sq)
    pair_start = np.zeros(nn.shape[0], dtype=np.int64)
    np.cumsum(sq[:-1], out=pair_start[1:])
    k = np.arange(total, dtype=np.int64) - pair_start[pair_graph]
    n = nn[pair_graph]
    first = np.zeros(nn.shape[0], dtype=np.int64)
    np.cumsum(nn[:-1], out=first[1:])
    src = first[pair_graph] + k // np.maximum(n, 1)
    dst = first[pair_graph] + k % np.maximum(n, 1)
    keep = src != dst
    return _finish(src[keep], dst[keep], pos, nn)


def radius_edges(pos: ArrayLike, n_node: ArrayLike, cutoff: float = 6.0) -> EdgeSet:
    """Ordered pairs ``(i, j)``, ``i != j``, of the same graph with ``|pos_i - pos_j| <= cutoff``.

    ``cutoff`` is in the units of ``pos`` and must be > 0. The edge set is symmetric.
    """
    pos, nn = _check(pos, n_node)
    cutoff = float(cutoff)
    if not np.isfinite(cutoff) or cutoff <= 0:
        raise InputError(f"cutoff must be a positive finite distance, got {cutoff!r}")
    if pos.shape[0] == 0:
        return _finish(np.zeros(0, np.int64), np.zeros(0, np.int64), pos, nn)
    shifted, graph_of_node = _grid_layout(pos, nn, cutoff)
    # Query slightly wider, then decide with distances of the *original* coordinates so the
    # result does not depend on rounding in the shifted frame.
    from scipy.spatial import cKDTree  # here: MOSES/code builds never import scipy

    pairs = cKDTree(shifted).query_pairs(cutoff * (1 + 1e-9) + 1e-12, output_type="ndarray")
    i, j = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    same = graph_of_node[i] == graph_of_node[j]
    i, j = i[same], j[same]
    keep = np.linalg.norm(pos[i] - pos[j], axis=1) <= cutoff
    i, j = i[keep], j[keep]
    return _finish(np.concatenate([i, j]), np.concatenate([j, i]), pos, nn)


def knn_edges(pos: ArrayLike, n_node: ArrayLike, k: int = 24) -> EdgeSet:
    """Edges ``j -> i`` from each node ``i``'s ``min(k, n - 1)`` nearest other nodes ``j`` of the
    same graph (PyG's ``knn_graph`` flow, source = neighbour). ``n * min(k, n - 1)`` edges per
    graph; the set need not be symmetric. Ties at the k-th distance are broken by the KD-tree.
    """
    pos, nn = _check(pos, n_node)
    k = as_positive_int(k, "k")
    if pos.shape[0] == 0:
        return _finish(np.zeros(0, np.int64), np.zeros(0, np.int64), pos, nn)
    # margin=None: every other graph is farther away than the farthest node of one's own graph
    shifted, graph_of_node = _grid_layout(pos, nn, None)
    kk = int(min(k + 1, shifted.shape[0]))
    from scipy.spatial import cKDTree

    dist, nbr = cKDTree(shifted).query(shifted, k=kk)
    dist = dist.reshape(shifted.shape[0], kk)
    nbr = nbr.reshape(shifted.shape[0], kk).astype(np.int64)
    centre = np.arange(shifted.shape[0])[:, None]
    valid = np.isfinite(dist) & (nbr != centre)
    valid &= graph_of_node[np.minimum(nbr, shifted.shape[0] - 1)] == graph_of_node[:, None]
    # keep at most k valid neighbours per row (valid ones come first: nearer than other graphs)
    valid &= np.cumsum(valid, axis=1) <= k
    rows, cols = np.nonzero(valid)
    return _finish(nbr[rows, cols], rows.astype(np.int64), pos, nn)


def build_edges(
    pos: ArrayLike, n_node: ArrayLike, method: str = "radius", *, cutoff: float = 6.0, k: int = 24
) -> EdgeSet:
    """Dispatch to `radius_edges` (``cutoff``), `knn_edges` (``k``) or `full_edges`."""
    if method == "radius":
        return radius_edges(pos, n_node, cutoff)
    if method == "knn":
        return knn_edges(pos, n_node, k)
    if method == "full":
        return full_edges(pos, n_node)
    raise InputError(f"unknown graph construction {method!r}; choose one of {GRAPH_METHODS}")
