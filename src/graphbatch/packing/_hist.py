"""Fast (nodes, edges) histogram of a size table: counting instead of sorting when the key range
is small (the same bins, order and inverse as ``GraphSizes.histogram``)."""

from __future__ import annotations

import numpy as np

from .._sizes import GraphSizes, SizeHistogram

__all__ = ["size_histogram"]

_MAX_DENSE = 1 << 24


def size_histogram(sizes: GraphSizes) -> SizeHistogram:
    """``sizes.histogram(return_inverse=True)``, in O(N) when ``max_nodes * max_edges`` is small."""
    max_e = int(sizes.n_edge.max()) + 1
    span = (int(sizes.n_node.max()) + 1) * max_e
    if span > _MAX_DENSE:
        return sizes.histogram(return_inverse=True)
    key = sizes.n_node * max_e + sizes.n_edge
    counts = np.bincount(key, minlength=span)
    uniq = np.flatnonzero(counts)
    rank = np.zeros(span, np.int64)
    rank[uniq] = np.arange(uniq.shape[0])
    return SizeHistogram(n_node=uniq // max_e, n_edge=uniq % max_e,
                         count=counts[uniq].astype(np.int64), inverse=rank[key])
