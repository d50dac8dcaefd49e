"""Tight bucket shapes by cost, in integers, and the bound on what K shapes can achieve.

Given the packs of a plan (each pack's *need*: ``(nodes + 1, edges, graphs + 1)``, rounded up to
``multiple`` in nodes and edges), ``K`` shapes are chosen and every pack is padded to a shape
that holds it. Two results live here:

* `choose_tight_shapes`: ``K`` shapes minimising the total cost ``sum over packs of cost(shape) +
  shape_cost * (shapes used)``, where ``cost(N, E, G) = c0 + c_node N + c_edge E + c_graph G``
  (integers: e.g. picoseconds of a fitted step-time model, with ``shape_cost`` a compilation
  amortised over the epochs), or by default the padded slots ``N * E0 + E * N0`` relative to a base
  shape ``(N0, E0)``. Each shape is *tight*: the componentwise maximum of the needs of the packs it
  holds (not a member of a scaled family). The packs are ordered (by their scale ``max(N / N0, E /
  E0)``, by nodes, and by edges: three orders, compared exactly) and each order is segmented
  optimally into at most ``K`` contiguous groups by dynamic programming (``O(K M^2)`` for ``M``
  distinct needs); the cheapest segmentation wins.
* `shape_padding_bound`: for the same packs, the least total padded nodes (and, separately,
  edges) of *any* assignment of the packs to at most ``K`` shapes -- each dimension alone is a
  one-dimensional K-segmentation, solved exactly by dynamic programming, and any K shapes in
  three dimensions give a K-size solution of each dimension alone, so real / bound is an upper
  bound on the node (edge) efficiency any K shapes reach on these packs.

Every decision is integer arithmetic (no float sums decide anything); sums are checked to stay
below 2**61.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._errors import InputError

__all__ = ["pack_needs", "choose_tight_shapes", "shape_padding_bound", "TIGHT_ORDERS"]

#: The pack orders `choose_tight_shapes` segments.
TIGHT_ORDERS = ("scale", "nodes", "edges")
_LIMIT = 2**61


def pack_needs(
    nodes: ArrayLike, edges: ArrayLike, graphs: ArrayLike, multiple: int = 1
) -> NDArray[np.int64]:
    """``[P, 3]`` int64 needs of packs of real totals ``nodes``/``edges``/``graphs``: one
    padding node and one padding graph reserved, nodes and edges rounded up to ``multiple``."""
    m = int(multiple)
    if m < 1:
        raise InputError(f"multiple must be >= 1, got {multiple}")
    n = np.asarray(nodes, np.int64) + 1
    e = np.asarray(edges, np.int64)
    g = np.asarray(graphs, np.int64) + 1
    return np.stack([-(-n // m) * m, -(-e // m) * m, g], axis=1)


def _distinct(
    needs: np.ndarray,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]:
    """Distinct needs (sorted rows) and how many packs have each."""
    u, inverse, counts = np.unique(needs, axis=0, return_inverse=True, return_counts=True)
    return u.astype(np.int64), counts.astype(np.int64), inverse.reshape(-1)


def _order(u: np.ndarray, how: str, base: tuple[int, int]) -> np.ndarray:
    """A permutation of the distinct needs ``u``: by family scale ``max(N/N0, E/E0)`` (exact:
    Python integers), by nodes, or by edges; ties by the whole need."""
    rows = [tuple(int(x) for x in r) for r in u.tolist()]
    n0, e0 = max(int(base[0]), 1), max(int(base[1]), 1)
    key: Callable[[int], tuple[Any, ...]]
    if how == "scale":
        key = lambda i: (max(rows[i][0] * e0, rows[i][1] * n0), rows[i])  # noqa: E731
    elif how == "nodes":
        key = lambda i: (rows[i][0], rows[i][1], rows[i][2])  # noqa: E731
    elif how == "edges":
        key = lambda i: (rows[i][1], rows[i][0], rows[i][2])  # noqa: E731
    else:
        raise InputError(f"order must be one of {', '.join(TIGHT_ORDERS)}, got {how!r}")
    return np.asarray(sorted(range(len(rows)), key=key), np.int64)


def _check_costs(cost: Sequence[int], shape_cost: int) -> tuple[int, int, int, int, int]:
    vals = []
    for v in (*cost, shape_cost):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 0:
            raise InputError(f"shape costs must be integers >= 0, got {v!r}")
        vals.append(int(v))
    if len(vals) != 5:
        raise InputError(f"cost must be (c0, c_node, c_edge, c_graph), got {tuple(cost)!r}")
    c0, c_node, c_edge, c_graph, c_shape = vals
    return c0, c_node, c_edge, c_graph, c_shape


def _segment(
    u: np.ndarray, w: np.ndarray, k: int, c: tuple[int, int, int, int], shape_cost: int
) -> tuple[int, list[int]]:
    """Optimal segmentation of ``u`` (in this order) into at most ``k`` contiguous groups:
    ``(total cost, group end positions)``. Group cost = (packs in it) * cost(componentwise max
    of its needs) + ``shape_cost``."""
    m = u.shape[0]
    c0, c_node, c_edge, c_graph = c
    cum = np.concatenate([[0], np.cumsum(w)]).astype(np.int64)
    inf = 2**62
    f = np.full((k + 1, m + 1), inf, np.int64)
    arg = np.full((k + 1, m + 1), -1, np.int64)
    f[0, 0] = 0
    for j in range(1, m + 1):
        # componentwise max of u[i:j] for every i < j (a running max from j - 1 back)
        seg = np.maximum.accumulate(u[j - 1 :: -1], axis=0)[::-1]  # row i: max of u[i:j]
        per_pack = c0 + c_node * seg[:, 0] + c_edge * seg[:, 1] + c_graph * seg[:, 2]
        cost = (cum[j] - cum[:j]) * per_pack + shape_cost
        for t in range(1, k + 1):
            prev = f[t - 1, :j]
            tot = np.where(prev < inf, prev + cost, inf)
            i = int(np.argmin(tot))  # first minimum: the earliest split
            f[t, j], arg[t, j] = tot[i], i
    best_t = int(np.argmin(f[1:, m])) + 1  # fewest groups among the least costs
    ends: list[int] = []
    j, t = m, best_t
    while j > 0:
        ends.append(j)
        j, t = int(arg[t, j]), t - 1
    return int(f[best_t, m]), ends[::-1]


def choose_tight_shapes(
    needs: ArrayLike,
    k: int,
    *,
    base: tuple[int, int],
    cost: Sequence[int] | None = None,
    shape_cost: int = 0,
    orders: Sequence[str] = TIGHT_ORDERS,
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """At most ``k`` tight shapes for packs of ``needs`` (``[P, 3]``, see `pack_needs`) that
    minimise the total cost (module docstring); ``cost=None``: padded slots relative to
    ``base = (N0, E0)``, i.e. ``(0, E0, N0, 0)``. Returns ``(shapes [k', 3] int64 sorted,
    group [P] int64 (each pack's shape index, a shape that holds it), total cost (int))``."""
    needs = np.asarray(needs, np.int64).reshape(-1, 3)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
        raise InputError(f"number of shapes must be an integer >= 1, got {k!r}")
    if needs.shape[0] == 0:
        return np.zeros((0, 3), np.int64), np.zeros(0, np.int64), 0
    n0, e0 = max(int(base[0]), 1), max(int(base[1]), 1)
    c0, c_node, c_edge, c_graph, c_shape = _check_costs(
        (0, e0, n0, 0) if cost is None else tuple(cost), shape_cost
    )
    u, w, inverse = _distinct(needs)
    top = (
        c0
        + c_node * int(u[:, 0].max())
        + c_edge * int(u[:, 1].max())
        + c_graph * int(u[:, 2].max())
    )
    if top * int(w.sum()) + c_shape * int(k) >= _LIMIT:
        raise InputError("shape costs too large: the total would exceed 2**61; scale them down")
    k = min(int(k), u.shape[0])
    best: tuple[int, NDArray[np.int64], list[int]] | None = None
    for how in orders:
        perm = _order(u, how, (n0, e0))
        total, ends = _segment(u[perm], w[perm], k, (c0, c_node, c_edge, c_graph), c_shape)
        if best is None or total < best[0]:
            best = (total, perm, ends)
    if best is None:
        raise InputError(f"orders must name at least one of {', '.join(TIGHT_ORDERS)}")
    total, perm, ends = best
    rows = []
    group_of = np.empty(u.shape[0], np.int64)
    start = 0
    for g, end in enumerate(ends):
        members = perm[start:end]
        rows.append(u[members].max(axis=0))
        group_of[members] = g
        start = end
    shapes = np.asarray(rows, np.int64).reshape(-1, 3)
    order = np.lexsort((shapes[:, 2], shapes[:, 1], shapes[:, 0]))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return shapes[order], rank[group_of[inverse]], int(total)


def _one_dim(values: np.ndarray, weights: np.ndarray, k: int) -> int:
    """Least ``sum(weights * size)`` over assignments of ``values`` to at most ``k`` sizes,
    each value to a size >= it (exact 1-D dynamic programming on the sorted distinct values)."""
    v, inv = np.unique(values, return_inverse=True)
    w = np.zeros(v.shape[0], np.int64)
    np.add.at(w, inv.reshape(-1), weights)
    m = v.shape[0]
    k = min(int(k), m)
    cum = np.concatenate([[0], np.cumsum(w)]).astype(np.int64)
    inf = 2**62
    f = np.full(m + 1, inf, np.int64)
    f[0] = 0
    out = inf
    for _ in range(k):
        g = np.full(m + 1, inf, np.int64)
        for j in range(1, m + 1):
            prev = f[:j]
            tot = np.where(prev < inf, prev + (cum[j] - cum[:j]) * v[j - 1], inf)
            g[j] = tot.min()
        f = g
        out = min(out, int(f[m]))
    return out


def shape_padding_bound(needs: ArrayLike, k: int) -> tuple[int, int]:
    """``(least padded nodes, least padded edges)`` of any assignment of packs of ``needs`` to
    at most ``k`` shapes (each dimension solved alone, exactly: a lower bound for the joint
    problem). Real totals over these give upper bounds on node and edge efficiency."""
    needs = np.asarray(needs, np.int64).reshape(-1, 3)
    if needs.shape[0] == 0:
        return 0, 0
    if int(needs[:, :2].max()) * needs.shape[0] >= _LIMIT:
        raise InputError("needs too large for an exact bound (total above 2**61)")
    ones = np.ones(needs.shape[0], np.int64)
    return _one_dim(needs[:, 0], ones, k), _one_dim(needs[:, 1], ones, k)
