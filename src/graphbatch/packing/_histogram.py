"""Tuple histogram packing: longest-pack-first (best fit) and shortest-pack-first (first fit from
the emptiest pack), tuple-packing paper Section 2.4, on (nodes, edges) bins with a graph cap.

Differences from the published listing (kept in ``benchmarks/_published_lpfhp.py``):

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

import numpy as np

from .._errors import InputError, UnknownNameError
from ._heuristics import heuristic_function, heuristic_keys
from ._patterns import PackPatterns

__all__ = ["pack_histogram", "FITS"]

FITS = ("best", "first")
_BIG = np.iinfo(np.int64).max // 4


def _check_limits(n, e, node_limit, edge_limit, graph_limit):
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


def item_order(n, e, node_limit, edge_limit, heuristic: str) -> np.ndarray:
    """Bins by decreasing heuristic of their size (as fractions of the limits, compared
    exactly), ties by nodes then edges, both decreasing."""
    key = heuristic_keys(heuristic, n, e, node_limit, edge_limit)
    if key.dtype == object:  # Python ints: their dense ranks sort the same way
        _, key = np.unique(key, return_inverse=True)
    return np.lexsort((-e, -n, -key.reshape(-1)))


def pack_histogram(
    n,
    e,
    count,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
    fit: str = "best",
    initial=None,
    return_base: bool = False,
):
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
        raise InputError(f"n, e, count must be 1-D arrays of one length, got {n.shape}, "
                         f"{e.shape}, {count.shape}")
    if fit not in FITS:
        raise UnknownNameError(f"fit must be one of {', '.join(FITS)}, got {fit!r}")
    node_limit, edge_limit, graph_limit = int(node_limit), int(edge_limit), int(graph_limit)
    _check_limits(n, e, node_limit, edge_limit, graph_limit)
    heuristic_function(heuristic)
    best = fit == "best"
    # heuristic values of the open packs' remainders as exact integer keys: int64 where every
    # key fits, else Python ints; remainders are >= 0 and never above the limits or the
    # initial packs' rooms, whose key bounds every key (the heuristics are monotone)
    bound_n, bound_e = node_limit, edge_limit
    if initial is not None:
        bound_n = max(bound_n, int(np.max(initial[0], initial=0)))
        bound_e = max(bound_e, int(np.max(initial[1], initial=0)))

    def hkey(rem_n, rem_e):
        return heuristic_keys(heuristic, rem_n, rem_e, node_limit, edge_limit)

    key_dt = hkey(np.array([bound_n]), np.array([bound_e])).dtype
    key_dt = object if key_dt == object else np.int64
    top_key = hkey(bound_n, bound_e)  # above it: no fitting pack (best fit)
    order = item_order(n, e, node_limit, edge_limit, heuristic)
    order = order[count[order] > 0]
    # smallest nodes / edges among the bins still to come (to retire packs nothing fits)
    suf_n = np.minimum.accumulate(n[order][::-1])[::-1]
    suf_e = np.minimum.accumulate(e[order][::-1])[::-1]

    # pattern tree: node k = parent's content + copies[k] graphs of bin[k];
    # t_count[k] packs end at node k
    t_parent: list[int] = []
    t_bin: list[int] = []
    t_copies: list[int] = []
    t_count: list[int] = []
    t_base: list[int] = []

    cap = 1024
    ids = np.zeros(cap, np.int64)
    rn = np.zeros(cap, np.int64)
    re = np.zeros(cap, np.int64)
    rk = np.zeros(cap, np.int64)
    cnt = np.zeros(cap, np.int64)
    hv = np.zeros(cap, key_dt)
    length = 0

    def grow():
        nonlocal ids, rn, re, rk, cnt, hv, cap
        cap *= 2
        ids, rn, re, rk, cnt, hv = (np.resize(a, cap) for a in (ids, rn, re, rk, cnt, hv))

    def add_node(parent, b, copies, count_, base, rem_n, rem_e, rem_k):
        nonlocal length
        k = len(t_parent)
        t_parent.append(parent)
        t_bin.append(b)
        t_copies.append(copies)
        t_count.append(count_)
        t_base.append(base)
        if rem_k > 0:
            if length == cap:
                compact(None)
                if length == cap:
                    grow()
            ids[length], rn[length], re[length], rk[length] = k, rem_n, rem_e, rem_k
            cnt[length] = count_
            hv[length] = hkey(rem_n, rem_e)
            length += 1
        return k

    def compact(pos):
        nonlocal length
        keep = cnt[:length] > 0
        keep &= rk[:length] > 0
        if pos is not None:
            keep &= (rn[:length] >= suf_n[pos]) & (re[:length] >= suf_e[pos])
        m = int(keep.sum())
        if m < length:
            for a in (ids, rn, re, rk, cnt, hv):
                a[:m] = a[:length][keep]
            length = m

    if initial is not None:  # one root per open pack, added in bulk
        r_n, r_e, r_k = (np.asarray(x, dtype=np.int64) for x in initial)
        m0 = r_n.shape[0]
        t_parent.extend([-1] * m0)
        t_bin.extend([-1] * m0)
        t_copies.extend([0] * m0)
        t_count.extend([1] * m0)
        t_base.extend(range(m0))
        act = np.flatnonzero(r_k > 0)
        while cap < act.shape[0]:
            grow()
        length = act.shape[0]
        ids[:length], rn[:length], re[:length], rk[:length] = act, r_n[act], r_e[act], r_k[act]
        cnt[:length] = 1
        hv[:length] = hkey(r_n[act], r_e[act])

    for pos, i in enumerate(order.tolist()):
        if pos % 64 == 0 and length:
            compact(pos)
        a, b, c = int(n[i]), int(e[i]), int(count[i])
        while c > 0:
            j = -1
            if length:
                L = length
                m = (rn[:L] >= a) & (re[:L] >= b)  # dead entries have rn = -1
                if best:  # the fitting pack with the smallest key, ties by position
                    j = int(np.argmin(np.where(m, hv[:L], top_key + 1)))
                else:
                    j = int(np.argmax(np.where(m, hv[:L], -1)))
                if not m[j]:
                    j = -1
            if j < 0:
                per = min(node_limit // a if a else _BIG, edge_limit // b if b else _BIG,
                          graph_limit)
                full, r = divmod(c, per)
                if full:
                    add_node(-1, i, per, full, -1, node_limit - per * a, edge_limit - per * b,
                             graph_limit - per)
                if r:
                    add_node(-1, i, r, 1, -1, node_limit - r * a, edge_limit - r * b,
                             graph_limit - r)
                break
            node, k = int(ids[j]), int(cnt[j])
            rem_n, rem_e, rem_k = int(rn[j]), int(re[j]), int(rk[j])
            if best:
                per = min(rem_n // a if a else _BIG, rem_e // b if b else _BIG, rem_k)
            else:
                per = 1
            if c >= per * k:
                cnt[j] = 0
                rn[j] = -1
                t_count[node] -= k
                add_node(node, i, per, k, t_base[node], rem_n - per * a, rem_e - per * b,
                         rem_k - per)
                c -= per * k
            else:
                q, r = divmod(c, per)
                moved = q + (1 if r else 0)
                cnt[j] -= moved
                if cnt[j] == 0:
                    rn[j] = -1
                t_count[node] -= moved
                if q:
                    add_node(node, i, per, q, t_base[node], rem_n - per * a, rem_e - per * b,
                             rem_k - per)
                if r:
                    add_node(node, i, r, 1, t_base[node], rem_n - r * a, rem_e - r * b,
                             rem_k - r)
                c = 0

    # flatten: every tree node still holding packs is a pattern (its path to the root)
    p_bins: list[int] = []
    p_copies: list[int] = []
    p_offsets = [0]
    p_count: list[int] = []
    p_base: list[int] = []
    for k, tc in enumerate(t_count):
        if tc <= 0:
            continue
        x = k
        while x >= 0:
            if t_bin[x] >= 0:
                p_bins.append(t_bin[x])
                p_copies.append(t_copies[x])
            x = t_parent[x]
        p_offsets.append(len(p_bins))
        p_count.append(tc)
        p_base.append(t_base[k])
    patterns = PackPatterns.build(p_bins, p_copies, p_offsets, p_count, n, e)
    if return_base:
        return patterns, np.asarray(p_base, dtype=np.int64)
    return patterns
