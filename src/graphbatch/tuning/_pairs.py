"""Whether a tune source's graphs come in reverse edge pairs, as radius graphs do: the built-in
SchNet factories use the bench's paired filter (``pair_edges=True``: the filter evaluated once
per pair) only then, and the plain per-edge filter otherwise (e.g. the stand-ins of a size table
with odd edge counts, a k-nearest-neighbour store)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._sizes import GraphSizes

__all__ = ["StandInGraphs", "pairable", "reverse_paired"]

#: Graphs of a dataset or store looked at (evenly spaced, first and last included).
SAMPLE_GRAPHS = 2048


class StandInGraphs(list):
    """Stand-in graphs of a size table (a plain list of graphs) that know whether their edges
    come in reverse pairs (``reverse_paired``), as they were made."""

    reverse_paired: bool = False


def pairable(sizes: GraphSizes) -> bool:
    """Whether stand-ins of ``sizes`` can come in reverse pairs: every edge count even (a
    radius graph's table, e.g. QM9's)."""
    return bool((np.asarray(sizes.n_edge) % 2 == 0).all())


def _pairs_ok(edge_index: np.ndarray) -> bool:
    """``graphbatch.models.pair_reverse_edges``' rule on one graph's local ``[2, E]`` edges:
    sorted stably by unordered pair, edges ``2k`` and ``2k + 1`` are reverses, no self loop."""
    src = edge_index[0].astype(np.int64)
    dst = edge_index[1].astype(np.int64)
    if src.shape[0] % 2 or (src == dst).any():
        return False
    order = np.lexsort((np.maximum(src, dst), np.minimum(src, dst)))  # stable
    a, b = order[0::2], order[1::2]
    return bool(((src[a] == dst[b]) & (dst[a] == src[b])).all())


def _edge_index(source: Any, i: int) -> np.ndarray | None:
    """Graph ``i``'s local ``[2, E]`` edge index: a graph store's, a PyG ``Data``'s or a
    dict's ``edge_index``, a ``jraph.GraphsTuple``'s senders and receivers; ``None`` if none."""
    if hasattr(source, "read_graph"):  # a graph store
        return np.asarray(source.read_graph(i)["edge_index"])
    item = source[i]
    ei = item.get("edge_index") if isinstance(item, dict) else getattr(item, "edge_index", None)
    if ei is None and hasattr(item, "senders") and hasattr(item, "receivers"):
        return np.stack([np.asarray(item.senders), np.asarray(item.receivers)])
    if ei is None:
        return None
    return np.asarray(ei.cpu() if hasattr(ei, "cpu") else ei)


def reverse_paired(source: Any) -> bool:
    """Whether ``source`` (what a tune factory gets: stand-ins, a graph store or a map-style
    dataset) has its edges in reverse pairs: the stand-ins' own mark, else `SAMPLE_GRAPHS`
    graphs of it checked (a graph outside the sample that is not paired still fails in
    SchNet's eager check, naming the rule)."""
    marked = getattr(source, "reverse_paired", None)
    if isinstance(marked, bool):
        return marked
    try:
        n = len(source)
    except TypeError:
        return False
    if n == 0:
        return False
    for i in np.unique(np.linspace(0, n - 1, min(n, SAMPLE_GRAPHS)).astype(np.int64)).tolist():
        ei = _edge_index(source, i)
        if ei is None or ei.ndim != 2 or ei.shape[0] != 2 or not _pairs_ok(ei):
            return False
    return True
