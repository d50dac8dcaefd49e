"""K padded shapes ("buckets") for a set of packs: the choice that minimises total padding.

Each pack needs a padded shape of at least ``(nodes + 1, edges, graphs + 1)`` (the padding
reservation included). Shapes are drawn from one family, the base budget scaled: a scale ``s``
gives ``(round_up(s * base.n_node, m), round_up(s * base.n_edge, m))``; a pack needs the smallest
scale whose shape holds it. A shape's cost is its slots relative to the base,
``n_node / base.n_node + n_edge / base.n_edge``; every pack is padded to the smallest chosen shape
it fits. Choosing ``K`` scales that minimise the summed cost is a 1-D segmentation solved exactly
by dynamic programming over the distinct scales (``O(K M^2)`` for ``M`` distinct scales).
"""

from __future__ import annotations

import numpy as np

from .._budget import Budget, round_up
from .._validate import MAX_SHAPE

__all__ = ["MAX_SHAPES", "pack_scales", "shape_for_scale", "graphs_for_scale", "choose_scales"]

#: Largest number of shapes ``buckets`` accepts.
MAX_SHAPES = 16


def shape_for_scale(scale, base: Budget, multiple: int):
    """Padded ``(n_node, n_edge)`` of the family at ``scale`` (scalar or array)."""
    s = np.asarray(scale, dtype=np.float64)
    nn = round_up(_scaled(s, base.n_node), multiple)
    ne = round_up(_scaled(s, base.n_edge), multiple) if base.n_edge else \
        np.zeros_like(np.asarray(nn))
    return nn, ne


def _scaled(s: np.ndarray, n: int) -> np.ndarray:
    """``ceil(s * n)`` as int64, capped at ``MAX_SHAPE``: a scale set by one dimension of a
    skewed base budget can blow the other past int64; every pack (planned under a budget of
    at most ``MAX_SHAPE``, or a single graph of at most ``MAX_COUNT``) fits the cap."""
    return np.ceil(np.minimum(s * n, float(MAX_SHAPE)) - 1e-9).astype(np.int64)


def graphs_for_scale(scale, base: Budget):
    """Padded graphs of the family at ``scale``: the budget's, grown with scales above 1 (so a
    large shape's room can be filled with small graphs)."""
    s = np.maximum(np.asarray(scale, dtype=np.float64), 1.0)
    return _scaled(s, base.n_graph)


def pack_scales(nodes, edges, base: Budget, multiple: int, graphs=None) -> np.ndarray:
    """Smallest scale of the family whose shape holds each pack of real ``nodes``/``edges``
    (and ``graphs``, when given)."""
    if base.n_edge == 0 and np.any(np.asarray(edges) > 0):
        raise ValueError("the shape family has 0 edges but packs hold edges; give the family "
                         "an edge count > 0")
    need_n = round_up(np.asarray(nodes, np.int64) + 1, multiple)
    need_e = round_up(np.asarray(edges, np.int64), multiple)
    s = need_n / base.n_node
    if base.n_edge:
        s = np.maximum(s, need_e / base.n_edge)
    if graphs is not None:
        g = np.asarray(graphs, np.int64) + 1
        s = np.maximum(s, np.where(g > base.n_graph, g / base.n_graph, 0.0))
    return s


def _cost(scales, base: Budget, multiple: int) -> np.ndarray:
    nn, ne = shape_for_scale(scales, base, multiple)
    c = np.asarray(nn, np.float64) / base.n_node
    if base.n_edge:
        c = c + np.asarray(ne, np.float64) / base.n_edge
    return c


def choose_scales(scales, k: int, base: Budget, multiple: int) -> tuple[np.ndarray, float]:
    """The at most ``k`` scales (sorted, the largest always included) that minimise the total
    cost of padding every pack to the smallest chosen shape it fits; returns ``(scales, cost)``."""
    if not 1 <= k <= MAX_SHAPES:
        raise ValueError(f"number of shapes must be in 1..{MAX_SHAPES}, got {k}")
    scales = np.asarray(scales, dtype=np.float64)
    if scales.size == 0:
        return np.zeros(0), 0.0
    v, w = np.unique(scales, return_counts=True)
    m = v.shape[0]
    c = _cost(v, base, multiple)
    wc = np.concatenate([[0], np.cumsum(w)]).astype(np.float64)  # wc[j] = weight of v[:j]
    k = min(k, m)
    # f[j]: least cost of covering v[:j+1] with the last shape at v[j]
    f = wc[1:] * c
    arg = [np.full(m, -1, np.int64)]
    for _ in range(1, k):
        g = np.full(m, np.inf)
        a = np.full(m, -1, np.int64)
        for j in range(1, m):
            cand = f[:j] + (wc[j + 1] - wc[1 : j + 1]) * c[j]
            i = int(np.argmin(cand))
            if cand[i] < f[j]:
                g[j], a[j] = cand[i], i
            else:  # one shape fewer is as good: keep the previous layer's solution
                g[j], a[j] = f[j], -2
        g[0] = f[0]
        a[0] = -2
        arg.append(a)
        f = g
    # walk back from the largest value
    chosen = []
    j, layer = m - 1, k - 1
    while j >= 0 and layer >= 0:
        a = arg[layer][j]
        if a == -2:
            layer -= 1
            continue
        chosen.append(j)
        j, layer = (a, layer - 1) if a >= 0 else (-1, layer - 1)
    chosen = np.asarray(sorted(chosen), np.int64)
    return v[chosen], float(f[m - 1])
