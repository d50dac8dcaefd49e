"""K padded shapes ("buckets") for a set of packs: the choice that minimises total padding.

Each pack needs a padded shape of at least ``(nodes + 1, edges, graphs + 1)`` (the padding
reservation included). Shapes are drawn from one family, the base budget scaled: a scale ``s``
gives ``(round_up(s * base.n_node, m), round_up(s * base.n_edge, m))``; a pack needs the smallest
scale whose shape holds it. A shape's cost is its slots relative to the base,
``n_node / base.n_node + n_edge / base.n_edge``; every pack is padded to the smallest chosen shape
it fits. Choosing ``K`` scales that minimise the summed cost is a 1-D segmentation solved exactly
by dynamic programming over the distinct scales (``O(K M^2)`` for ``M`` distinct scales).
Scales are exact fractions and costs integers over one denominator: no rounding decides a
choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._budget import Budget, round_up
from .._errors import InputError
from .._exact import fits_int64
from .._validate import MAX_SHAPE

__all__ = [
    "MAX_SHAPES",
    "PackScales",
    "pack_scales",
    "shape_for_scale",
    "graphs_for_scale",
    "choose_scales",
]

#: Largest number of shapes ``buckets`` accepts.
MAX_SHAPES = 16

#: One scale: a real or an exact fraction.
Scale = int | float | Fraction


def _fractions(scale: Scale | ArrayLike) -> tuple[list[Fraction], bool]:
    """Scales (a real, a `Fraction`, or an array of them) as exact fractions (a float as its
    exact binary value); and whether a scalar was given."""
    arr = np.asarray(scale, dtype=object)
    return [Fraction(x) for x in arr.reshape(-1).tolist()], arr.ndim == 0


def _scaled(s: Fraction, n: int) -> int:
    """``ceil(s * n)``, capped at ``MAX_SHAPE``: a scale set by one dimension of a skewed base
    budget can blow the other past int64; every pack (planned under a budget of at most
    ``MAX_SHAPE``, or a single graph of at most ``MAX_COUNT``) fits the cap."""
    x = s * n
    return min(-(-x.numerator // x.denominator), MAX_SHAPE)


@overload
def shape_for_scale(scale: Scale, base: Budget, multiple: int) -> tuple[int, int]: ...


@overload
def shape_for_scale(
    scale: np.ndarray, base: Budget, multiple: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]: ...


def shape_for_scale(
    scale: Scale | np.ndarray, base: Budget, multiple: int
) -> tuple[int, int] | tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Padded ``(n_node, n_edge)`` of the family at ``scale`` (scalar or array; exact)."""
    fr, scalar = _fractions(scale)
    pad_nodes = round_up(np.array([_scaled(s, base.n_node) for s in fr], np.int64), multiple)
    pad_edges = (
        round_up(np.array([_scaled(s, base.n_edge) for s in fr], np.int64), multiple)
        if base.n_edge
        else np.zeros(len(fr), np.int64)
    )
    pad_nodes, pad_edges = (
        np.atleast_1d(pad_nodes).astype(np.int64),
        np.atleast_1d(pad_edges).astype(np.int64),
    )
    return (int(pad_nodes[0]), int(pad_edges[0])) if scalar else (pad_nodes, pad_edges)


@overload
def graphs_for_scale(scale: Scale, base: Budget) -> int: ...


@overload
def graphs_for_scale(scale: np.ndarray, base: Budget) -> NDArray[np.int64]: ...


def graphs_for_scale(scale: Scale | np.ndarray, base: Budget) -> int | NDArray[np.int64]:
    """Padded graphs of the family at ``scale``: the budget's, grown with scales above 1 (so a
    large shape's room can be filled with small graphs)."""
    fr, scalar = _fractions(scale)
    g = np.array([_scaled(max(s, Fraction(1)), base.n_graph) for s in fr], np.int64)
    return int(g[0]) if scalar else g


@dataclass(frozen=True)
class PackScales:
    """The distinct scales packs need (exact fractions, ascending) and how many packs need
    each."""

    values: tuple[Fraction, ...]
    counts: NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.values)


def pack_scales(
    nodes: ArrayLike,
    edges: ArrayLike,
    base: Budget,
    multiple: int,
    graphs: ArrayLike | None = None,
) -> PackScales:
    """Smallest scale of the family whose shape holds each pack of real ``nodes``/``edges``
    (and ``graphs``, when given): ``max(need_n / base.n_node, need_e / base.n_edge, graphs /
    base.n_graph)`` with the needs rounded up to ``multiple`` (the graph term only above the
    budget's graphs), as exact fractions, counted per distinct value."""
    if base.n_edge == 0 and np.any(np.asarray(edges) > 0):
        raise InputError(
            "the shape family has 0 edges but packs hold edges; give the family an edge count > 0"
        )
    need_n = np.atleast_1d(round_up(np.asarray(nodes, np.int64) + 1, multiple))
    need_e = np.atleast_1d(round_up(np.asarray(edges, np.int64), multiple))
    g = np.zeros_like(need_n) if graphs is None else np.atleast_1d(np.asarray(graphs, np.int64)) + 1
    if need_n.shape[0] == 0 or np.asarray(nodes).size == 0:
        return PackScales((), np.zeros(0, np.int64))
    triples, counts = np.unique(np.stack([need_n, need_e, g], axis=1), axis=0, return_counts=True)
    merged: dict[Fraction, int] = {}
    for (a, b, c), k in zip(triples.tolist(), counts.tolist(), strict=False):
        s = Fraction(a, base.n_node)
        if base.n_edge:
            s = max(s, Fraction(b, base.n_edge))
        if c > base.n_graph:
            s = max(s, Fraction(c, base.n_graph))
        merged[s] = merged.get(s, 0) + k
    values = tuple(sorted(merged))
    return PackScales(values, np.array([merged[v] for v in values], np.int64))


def _as_pack_scales(scales: PackScales | ArrayLike) -> PackScales:
    if isinstance(scales, PackScales):
        return scales
    fr, _ = _fractions(scales)
    merged: dict[Fraction, int] = {}
    for s in fr:
        merged[s] = merged.get(s, 0) + 1
    values = tuple(sorted(merged))
    return PackScales(values, np.array([merged[v] for v in values], np.int64))


def _costs(values: tuple[Fraction, ...], base: Budget, multiple: int) -> tuple[list[int], int]:
    """Each scale's shape cost ``n_node / base.n_node + n_edge / base.n_edge`` as integers
    over one denominator: ``(numerators, denominator)``."""
    pad_nodes, pad_edges = shape_for_scale(np.array(values, dtype=object), base, multiple)
    if base.n_edge:
        return (
            [
                int(a) * base.n_edge + int(b) * base.n_node
                for a, b in zip(pad_nodes, pad_edges, strict=False)
            ],
            base.n_node * base.n_edge,
        )
    return [int(a) for a in pad_nodes], base.n_node


def choose_scales(
    scales: PackScales | ArrayLike, k: int, base: Budget, multiple: int
) -> tuple[np.ndarray, Fraction]:
    """The at most ``k`` scales (sorted, the largest always included) that minimise the total
    cost of padding every pack to the smallest chosen shape it fits; returns ``(scales, cost)``
    as exact fractions (an object array and a `Fraction`). ``scales``: `pack_scales` of the
    packs, or one scale per pack (reals)."""
    if not 1 <= k <= MAX_SHAPES:
        raise InputError(f"number of shapes must be in 1..{MAX_SHAPES}, got {k}")
    ps = _as_pack_scales(scales)
    m = len(ps)
    if m == 0:
        return np.zeros(0, dtype=object), Fraction(0)
    cost, den = _costs(ps.values, base, multiple)
    # integer dynamic programme: int64 where every total fits, else Python ints
    total = int(ps.counts.sum()) * max(cost)
    dt = np.int64 if fits_int64(2 * total) else object
    c = np.array(cost, dtype=dt)
    wc = np.concatenate([[0], np.cumsum(ps.counts)]).astype(dt)  # wc[j] = weight of v[:j]
    k = min(k, m)
    # f[j]: least cost of covering v[:j+1] with the last shape at v[j]
    f = wc[1:] * c
    arg = [np.full(m, -1, np.int64)]
    for _ in range(1, k):
        g = f.copy()
        a = np.full(m, -2, np.int64)  # -2: one shape fewer is as good (previous layer)
        for j in range(1, m):
            cand = f[:j] + (wc[j + 1] - wc[1 : j + 1]) * c[j]
            i = int(np.argmin(cand))
            if cand[i] < f[j]:
                g[j], a[j] = cand[i], i
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
    chosen = sorted(chosen)
    return np.array([ps.values[i] for i in chosen], dtype=object), Fraction(int(f[m - 1]), den)
