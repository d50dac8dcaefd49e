"""Tuple histogram packing: longest-pack-first (best fit) and shortest-pack-first (first fit from
the emptiest pack), tuple-packing paper Section 2.4, on (nodes, edges) bins with a graph cap.

Differences from the published listing (kept in ``benchmarks/planning/_published_lpfhp.py``):

* copies of one bin are combined with each other: a best-fit step fills each chosen pack with as
  many copies of the incoming bin as fit (what repeating single best-fit insertions does), so
  packs fill at any limit, also when a limit holds dozens of graphs;
* ``min`` is the minimum, every heuristic is applied to remainders as fractions of the limits,
  compared exactly (integer keys, `heuristic_keys`);
* the graph cap is a third limit that is checked, and an exactly full pack stops being searched;
* the search over open packs is vectorised with NumPy (one pass per step, not one per value of
  the heuristic), and packs that can take no remaining bin are retired.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from .._errors import InputError, UnknownNameError
from ._heuristics import heuristic_function, heuristic_keys
from ._patterns import PackPatterns

__all__ = ["pack_histogram", "FITS"]

FITS = ("best", "first")
_BIG = np.iinfo(np.int64).max // 4


def _check_limits(
    n: NDArray[np.int64], e: NDArray[np.int64], node_limit: int, edge_limit: int, graph_limit: int
) -> None:
    if node_limit < 0:
        raise InputError(f"node limit must be >= 0, got {node_limit}")
    if edge_limit < 0:
        raise InputError(f"edge limit must be >= 0, got {edge_limit}")
    if graph_limit < 1:
        raise InputError(f"graph limit (max graphs per pack) must be >= 1, got {graph_limit}")
    if n.shape[0] and (n.max() > node_limit or e.max() > edge_limit):
        k = int(np.flatnonzero((n > node_limit) | (e > edge_limit))[0])
        raise InputError(
            f"graphs of {n[k]} nodes / {e[k]} edges exceed the limits of {node_limit} nodes / "
            f"{edge_limit} edges per pack; raise the limits or drop those graphs"
        )


def item_order(
    n: NDArray[np.int64], e: NDArray[np.int64], node_limit: int, edge_limit: int, heuristic: str
) -> np.ndarray:
    """Bins by decreasing heuristic of their size (as fractions of the limits, compared
    exactly), ties by nodes then edges, both decreasing."""
    key = heuristic_keys(heuristic, n, e, node_limit, edge_limit)
    if key.dtype == object:  # Python ints: their dense ranks sort the same way
        _, key = np.unique(key, return_inverse=True)
    return np.lexsort((-e, -n, -key.reshape(-1)))


#: Packs already open: their remaining nodes, edges and graphs (one pack each).
Initial = tuple[ArrayLike, ArrayLike, ArrayLike]


@overload
def pack_histogram(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = ...,
    fit: str = ...,
    initial: Initial | None = ...,
    return_base: Literal[False] = ...,
) -> PackPatterns: ...


@overload
def pack_histogram(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = ...,
    fit: str = ...,
    initial: Initial | None = ...,
    return_base: Literal[True],
) -> tuple[PackPatterns, NDArray[np.int64]]: ...


def pack_histogram(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
    fit: str = "best",
    initial: Initial | None = None,
    return_base: bool = False,
) -> PackPatterns | tuple[PackPatterns, NDArray[np.int64]]:
    """Pack a (nodes, edges) -> count histogram into packs of at most ``node_limit`` nodes,
    ``edge_limit`` edges and ``graph_limit`` graphs (real content; no padding reservation).

    Bins are taken by decreasing heuristic of their size. ``fit="best"`` (longest-pack-first)
    puts graphs into the open pack with the smallest heuristic remainder that still fits them,
    as many copies per pack as fit; ``fit="first"`` (shortest-pack-first) scans from the pack with
    the largest remainder and adds one copy per pack. A bin that fits no open pack opens new packs.

    ``initial``: optional ``(rem_nodes, rem_edges, rem_graphs)`` of packs already open (one pack
    each); with ``return_base=True`` the result is ``(patterns, base)`` where ``base[t]`` is the
    initial pack that pattern ``t`` extends, or -1 for a new pack. Returns `PackPatterns`.
    """
    n = np.asarray(n, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    if not (n.shape == e.shape == count.shape) or n.ndim != 1:
        raise InputError(
            f"n, e, count must be 1-D arrays of one length, got {n.shape}, {e.shape}, {count.shape}"
        )
    if fit not in FITS:
        raise UnknownNameError(f"fit must be one of {', '.join(FITS)}, got {fit!r}")
    node_limit, edge_limit, graph_limit = int(node_limit), int(edge_limit), int(graph_limit)
    _check_limits(n, e, node_limit, edge_limit, graph_limit)
    heuristic_function(heuristic)
    packer = _Packer(heuristic, (node_limit, edge_limit, graph_limit), fit == "best", initial)
    order = item_order(n, e, node_limit, edge_limit, heuristic)
    order = order[count[order] > 0]
    # smallest nodes / edges among the bins still to come (to retire packs nothing fits)
    suf_n = np.minimum.accumulate(n[order][::-1])[::-1]
    suf_e = np.minimum.accumulate(e[order][::-1])[::-1]
    for pos, i in enumerate(order.tolist()):
        if pos % 64 == 0 and packer.open.length:
            packer.open.compact(int(suf_n[pos]), int(suf_e[pos]))
        packer.place(i, int(n[i]), int(e[i]), int(count[i]))
    bins, copies, offsets, counts, base = packer.tree.patterns()
    patterns = PackPatterns.build(bins, copies, offsets, counts, n, e)
    if return_base:
        return patterns, np.asarray(base, dtype=np.int64)
    return patterns


class _PatternTree:
    """Packs as a tree of contents: node ``k`` holds its parent's content plus ``copies[k]``
    graphs of bin ``bin[k]`` (``-1``: a root, an empty or initial pack); ``count[k]`` packs end
    at node ``k``; ``base[k]`` is the initial pack the node extends (``-1``: none)."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.bin: list[int] = []
        self.copies: list[int] = []
        self.count: list[int] = []
        self.base: list[int] = []

    def add(self, parent: int, b: int, copies: int, count: int, base: int) -> int:
        k = len(self.parent)
        self.parent.append(parent)
        self.bin.append(b)
        self.copies.append(copies)
        self.count.append(count)
        self.base.append(base)
        return k

    def patterns(self) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """Every node still holding packs as a pattern (its path to the root): ``(bins,
        copies, offsets, count, base)`` lists."""
        p_bins: list[int] = []
        p_copies: list[int] = []
        p_offsets = [0]
        p_count: list[int] = []
        p_base: list[int] = []
        for k, tc in enumerate(self.count):
            if tc <= 0:
                continue
            x = k
            while x >= 0:
                if self.bin[x] >= 0:
                    p_bins.append(self.bin[x])
                    p_copies.append(self.copies[x])
                x = self.parent[x]
            p_offsets.append(len(p_bins))
            p_count.append(tc)
            p_base.append(self.base[k])
        return p_bins, p_copies, p_offsets, p_count, p_base


class _OpenPacks:
    """The open packs, as parallel arrays of ``length`` entries (capacity doubled when full):
    tree node ``ids``, remaining nodes ``rem_nodes``, edges ``rem_edges`` and graphs
    ``rem_graphs``, the number of packs ``packs`` ending at that node and the heuristic key
    ``rem_key`` of the remainder. A closed entry has
    ``rem_nodes = -1`` until `compact` drops it."""

    #: The parallel arrays, grown and compacted together.
    COLUMNS = ("ids", "rem_nodes", "rem_edges", "rem_graphs", "packs", "rem_key")

    def __init__(self, key_dt: DTypeLike, cap: int = 1024) -> None:
        self.cap = cap
        self.ids = np.zeros(cap, np.int64)
        self.rem_nodes = np.zeros(cap, np.int64)
        self.rem_edges = np.zeros(cap, np.int64)
        self.rem_graphs = np.zeros(cap, np.int64)
        self.packs = np.zeros(cap, np.int64)
        self.rem_key = np.zeros(cap, key_dt)
        self.length = 0

    def grow(self) -> None:
        self.cap *= 2
        for name in self.COLUMNS:
            setattr(self, name, np.resize(getattr(self, name), self.cap))

    def compact(self, min_n: int | None = None, min_e: int | None = None) -> None:
        """Drop closed and full entries and, given the smallest nodes and edges of the bins
        still to come, the packs none of them fits."""
        length = self.length
        keep = self.packs[:length] > 0
        keep &= self.rem_graphs[:length] > 0
        if min_n is not None and min_e is not None:  # (given together)
            keep &= (self.rem_nodes[:length] >= min_n) & (self.rem_edges[:length] >= min_e)
        m = int(keep.sum())
        if m < length:
            for name in self.COLUMNS:
                column = getattr(self, name)
                column[:m] = column[:length][keep]
            self.length = m

    def push(self, node: int, rem_n: int, rem_e: int, rem_k: int, count: int, key: int) -> None:
        if self.length == self.cap:
            self.compact()
            if self.length == self.cap:
                self.grow()
        j = self.length
        self.ids[j], self.rem_nodes[j], self.rem_edges[j], self.rem_graphs[j] = (
            node,
            rem_n,
            rem_e,
            rem_k,
        )
        self.packs[j] = count
        self.rem_key[j] = key
        self.length += 1


class _Packer:
    """The state of `pack_histogram`: the pattern tree, the open packs and the heuristic keys
    of remainders (exact integers: int64 where every key fits, else Python ints; remainders
    are >= 0 and never above the limits or the initial packs' rooms, whose key bounds every
    key, the heuristics being monotone)."""

    def __init__(
        self, heuristic: str, limits: tuple[int, int, int], best: bool, initial: Initial | None
    ) -> None:
        self.heuristic, self.limits, self.best = heuristic, limits, best
        node_limit, edge_limit, _ = limits
        bound_n, bound_e = node_limit, edge_limit
        if initial is not None:
            bound_n = max(bound_n, int(np.max(initial[0], initial=0)))
            bound_e = max(bound_e, int(np.max(initial[1], initial=0)))
        key_dt = self.key(np.array([bound_n]), np.array([bound_e])).dtype
        self.top_key = self.key(bound_n, bound_e)  # above it: no fitting pack (best fit)
        self.tree = _PatternTree()
        self.open = _OpenPacks(object if key_dt == np.dtype(object) else np.int64)
        if initial is not None:
            self._open_initial(initial)

    @overload
    def key(self, rem_n: int, rem_e: int) -> int: ...

    @overload
    def key(self, rem_n: np.ndarray, rem_e: np.ndarray) -> np.ndarray: ...

    def key(self, rem_n: int | np.ndarray, rem_e: int | np.ndarray) -> int | np.ndarray:
        node_limit, edge_limit, _ = self.limits
        return heuristic_keys(self.heuristic, rem_n, rem_e, node_limit, edge_limit)

    def _open_initial(self, initial: Initial) -> None:
        """One root per open pack, added in bulk."""
        r_n, r_e, r_k = (np.asarray(x, dtype=np.int64) for x in initial)
        m0 = r_n.shape[0]
        tree, open_packs = self.tree, self.open
        tree.parent.extend([-1] * m0)
        tree.bin.extend([-1] * m0)
        tree.copies.extend([0] * m0)
        tree.count.extend([1] * m0)
        tree.base.extend(range(m0))
        act = np.flatnonzero(r_k > 0)
        while open_packs.cap < act.shape[0]:
            open_packs.grow()
        length = open_packs.length = act.shape[0]
        (
            open_packs.ids[:length],
            open_packs.rem_nodes[:length],
            open_packs.rem_edges[:length],
            open_packs.rem_graphs[:length],
        ) = (
            act,
            r_n[act],
            r_e[act],
            r_k[act],
        )
        open_packs.packs[:length] = 1
        open_packs.rem_key[:length] = self.key(r_n[act], r_e[act])

    def add(
        self,
        parent: int,
        b: int,
        copies: int,
        count: int,
        base: int,
        rem_n: int,
        rem_e: int,
        rem_k: int,
    ) -> None:
        """``count`` packs of ``parent``'s content plus ``copies`` graphs of bin ``b``, with
        that remainder; open while it has room for a graph."""
        k = self.tree.add(parent, b, copies, count, base)
        if rem_k > 0:
            self.open.push(k, rem_n, rem_e, rem_k, count, self.key(rem_n, rem_e))

    def _fitting(self, a: int, b: int) -> int:
        """The open entry taking a graph of ``a`` nodes and ``b`` edges: the smallest key
        (best fit) or the largest (first fit from the emptiest), ties by position; -1: none."""
        open_packs = self.open
        if not open_packs.length:
            return -1
        L = open_packs.length
        m = (open_packs.rem_nodes[:L] >= a) & (
            open_packs.rem_edges[:L] >= b
        )  # closed entries have rem_nodes = -1
        if self.best:
            j = int(np.argmin(np.where(m, open_packs.rem_key[:L], self.top_key + 1)))
        else:
            j = int(np.argmax(np.where(m, open_packs.rem_key[:L], -1)))
        return j if m[j] else -1

    def place(self, i: int, a: int, b: int, c: int) -> None:
        """The ``c`` graphs of bin ``i`` (``a`` nodes, ``b`` edges each): into fitting open
        packs while there are any, the rest into new packs."""
        node_limit, edge_limit, graph_limit = self.limits
        open_packs, tree = self.open, self.tree
        while c > 0:
            j = self._fitting(a, b)
            if j < 0:
                per = min(
                    node_limit // a if a else _BIG, edge_limit // b if b else _BIG, graph_limit
                )
                full, r = divmod(c, per)
                if full:
                    self.add(
                        -1,
                        i,
                        per,
                        full,
                        -1,
                        node_limit - per * a,
                        edge_limit - per * b,
                        graph_limit - per,
                    )
                if r:
                    self.add(
                        -1, i, r, 1, -1, node_limit - r * a, edge_limit - r * b, graph_limit - r
                    )
                return
            node, k = int(open_packs.ids[j]), int(open_packs.packs[j])
            rem_n, rem_e, rem_k = (
                int(open_packs.rem_nodes[j]),
                int(open_packs.rem_edges[j]),
                int(open_packs.rem_graphs[j]),
            )
            if self.best:
                per = min(rem_n // a if a else _BIG, rem_e // b if b else _BIG, rem_k)
            else:
                per = 1
            if c >= per * k:
                open_packs.packs[j] = 0
                open_packs.rem_nodes[j] = -1
                tree.count[node] -= k
                self.add(
                    node, i, per, k, tree.base[node], rem_n - per * a, rem_e - per * b, rem_k - per
                )
                c -= per * k
            else:
                q, r = divmod(c, per)
                moved = q + (1 if r else 0)
                open_packs.packs[j] -= moved
                if open_packs.packs[j] == 0:
                    open_packs.rem_nodes[j] = -1
                tree.count[node] -= moved
                if q:
                    self.add(
                        node,
                        i,
                        per,
                        q,
                        tree.base[node],
                        rem_n - per * a,
                        rem_e - per * b,
                        rem_k - per,
                    )
                if r:
                    self.add(
                        node, i, r, 1, tree.base[node], rem_n - r * a, rem_e - r * b, rem_k - r
                    )
                c = 0
