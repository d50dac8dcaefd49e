"""Bandwidth of each graph and its reduction by Reverse Cuthill–McKee (the paper's Section 3.1).

The bandwidth of a graph in a given node order is the smallest ``B`` with ``a_ij = 0`` whenever
``|i - j| > B``, i.e. the largest ``|sender - receiver|`` over its edges (0 without edges; self
loops count 0). Reordering is a one-time preprocessing step: `reduce_bandwidth` finds a
permutation per graph and `apply_reordering` permutes edges and node data consistently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy.sparse.csgraph import reverse_cuthill_mckee

from .._errors import InputError
from ._graphs import EdgeGraphs

__all__ = [
    "Reordering",
    "apply_reordering",
    "bandwidths",
    "graph_bandwidth",
    "reduce_bandwidth",
    "rcm_permutation",
]


def _segment_max(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Max of ``values`` over consecutive segments of the given lengths (0 for empty ones)."""
    out = np.zeros(counts.shape[0], dtype=np.int64)
    nonempty = counts > 0
    if values.size:
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[nonempty]
        out[nonempty] = np.maximum.reduceat(values, starts)
    return out


def bandwidths(graphs: EdgeGraphs) -> np.ndarray:
    """Bandwidth of every graph in its current node order, int64 ``[G]``."""
    return _segment_max(np.abs(graphs.senders - graphs.receivers), graphs.n_edge)


def graph_bandwidth(edge_index: ArrayLike) -> int:
    """Bandwidth of one graph given ``edge_index[2, E]`` (0 without edges)."""
    ei = np.asarray(edge_index, dtype=np.int64)
    if ei.size == 0:
        return 0
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise InputError(f"edge_index must have shape [2, E], got {ei.shape}")
    return int(np.abs(ei[0] - ei[1]).max())


def rcm_permutation(num_nodes: int, edge_index: ArrayLike) -> np.ndarray:
    """RCM order of one graph on its symmetrised adjacency: ``perm[k]`` = old id at position k."""
    ei = np.asarray(edge_index, dtype=np.int64).reshape(2, -1)
    if num_nodes < 0:
        raise InputError(f"num_nodes must be >= 0, got {num_nodes}")
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise InputError(f"edge_index holds ids outside [0, {num_nodes})")
    return _rcm(num_nodes, ei[0], ei[1])


def _rcm(n: int, s: np.ndarray, r: np.ndarray) -> np.ndarray:
    if n == 0:
        return np.zeros(0, np.int64)
    rows = np.concatenate([s, r])
    cols = np.concatenate([r, s])
    adj = sp.csr_array((np.ones(rows.shape[0], np.int8), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    return reverse_cuthill_mckee(adj, symmetric_mode=True).astype(np.int64)


@dataclass(frozen=True)
class Reordering:
    """A node permutation per graph and the bandwidths it gives.

    ``perm`` (int64 ``[N]``) is the concatenation of each graph's local permutation:
    ``perm[node_offsets[g] + k]`` is the old local id placed at new position ``k`` of graph ``g``.
    ``before``/``after``/``rcm`` are per-graph bandwidths (original order, chosen order, plain RCM
    order); ``used_rcm[g]`` is False where RCM would have widened the band and the original order
    was kept, so ``after <= before`` always holds.
    """

    perm: np.ndarray
    before: np.ndarray
    after: np.ndarray
    rcm: np.ndarray
    used_rcm: np.ndarray

    def inverse(self, node_offsets: np.ndarray) -> np.ndarray:
        """New local id of each old local node, concatenated like ``perm``."""
        return _inverse(self.perm, node_offsets)


def _inverse(perm: np.ndarray, node_offsets: np.ndarray) -> np.ndarray:
    n_node = np.diff(node_offsets)
    base = np.repeat(node_offsets[:-1], n_node)
    if perm.shape[0] != base.shape[0]:
        raise InputError(
            f"permutation covers {perm.shape[0]} nodes, the graphs have {base.shape[0]}"
        )
    bad = (perm < 0) | (perm >= np.repeat(n_node, n_node))
    if bad.any() or (
        base.size and (np.bincount(perm[~bad] + base[~bad], minlength=base.size) != 1).any()
    ):
        raise InputError("perm is not a permutation of each graph's local node ids")
    inv = np.empty_like(perm)
    inv[perm + base] = np.arange(perm.shape[0]) - base
    return inv


def reduce_bandwidth(graphs: EdgeGraphs, *, keep_better: bool = True) -> Reordering:
    """RCM permutation of every graph (symmetrised adjacency), all graphs in one SciPy call.

    The graphs form one block-diagonal matrix; RCM emits each connected component contiguously,
    so each graph's nodes, taken in the global RCM order, are an RCM order of that graph. With
    ``keep_better`` (default) a graph keeps its original order when RCM would not narrow its band.
    """
    n_total = graphs.num_nodes
    gs, gr = graphs.global_edges()
    node_graph = graphs.node_graph()
    before = bandwidths(graphs)
    perm_global = _rcm(n_total, gs, gr)
    position = np.empty(n_total, np.int64)
    position[perm_global] = np.arange(n_total, dtype=np.int64)
    order = np.lexsort((position, node_graph))  # per graph, nodes sorted by RCM position
    base = np.repeat(graphs.node_offsets[:-1], graphs.n_node)
    perm = order - base
    rcm_bw = _bandwidth_under(graphs, perm)
    used = rcm_bw < before if keep_better else np.ones(len(graphs), bool)
    if keep_better:
        keep_old = np.repeat(~used, graphs.n_node)
        perm = np.where(keep_old, np.arange(n_total) - base, perm)
    after = np.where(used, rcm_bw, before)
    return Reordering(perm=perm, before=before, after=after, rcm=rcm_bw, used_rcm=used)


def _bandwidth_under(graphs: EdgeGraphs, perm: np.ndarray) -> np.ndarray:
    inv = _inverse(perm, graphs.node_offsets)
    base = np.repeat(graphs.node_offsets[:-1], graphs.n_edge)
    d = np.abs(inv[graphs.senders + base] - inv[graphs.receivers + base])
    return _segment_max(d, graphs.n_edge)


def apply_reordering(graphs: EdgeGraphs, reordering: Reordering) -> EdgeGraphs:
    """The graphs with nodes renumbered by ``reordering``: edges relabelled, node data permuted.

    Node ``perm[k]`` of a graph becomes node ``k``; every ``node_data`` array (features, labels)
    is permuted the same way, so a node keeps its own features and label.
    """
    inv = reordering.inverse(graphs.node_offsets)
    ebase = np.repeat(graphs.node_offsets[:-1], graphs.n_edge)
    nbase = np.repeat(graphs.node_offsets[:-1], graphs.n_node)
    take = reordering.perm + nbase
    return graphs.replace(
        senders=inv[graphs.senders + ebase],
        receivers=inv[graphs.receivers + ebase],
        node_data={k: v[take] for k, v in graphs.node_data.items()},
    )
