"""Plain reference helpers for the packing tests (brute force, independent of the library)."""

from __future__ import annotations

from functools import cache

import numpy as np

from graphbatch import Budget
from graphbatch._errors import InputError


def brute_force_min_packs(items, node_cap, edge_cap, graph_cap):
    """Fewest packs holding ``items`` [(nodes, edges), ...] under the caps (exact, <= ~12 items)."""
    items = list(items)
    m = len(items)
    full = (1 << m) - 1
    fits = {}
    for mask in range(1, full + 1):
        n = e = k = 0
        for i in range(m):
            if mask >> i & 1:
                n += items[i][0]
                e += items[i][1]
                k += 1
        fits[mask] = n <= node_cap and e <= edge_cap and k <= graph_cap

    @cache
    def f(mask):
        if mask == 0:
            return 0
        low = mask & -mask
        rest = mask ^ low
        best = m + 1
        sub = rest
        while True:
            s = sub | low
            if fits[s]:
                best = min(best, 1 + f(mask ^ s))
            if sub == 0:
                break
            sub = (sub - 1) & rest
        return best

    return f(full)


def expand(hist):
    """[(nodes, edges), ...] from a {(nodes, edges): count} dict."""
    return [k for k, c in sorted(hist.items()) for _ in range(c)]


def greedy_offsets_reference(nodes: np.ndarray, edges: np.ndarray, budget: Budget) -> np.ndarray:
    """Plain per-graph loop of Algorithm 3: the reference form of
    `graphbatch.planners.greedy_offsets` (tests and benchmarks compare against it)."""
    node_cap, edge_cap, graph_cap = (
        budget.node_capacity,
        budget.edge_capacity,
        budget.graph_capacity,
    )
    offsets = [0]
    batch_n = batch_e = batch_g = 0
    for i, (v, e) in enumerate(zip(nodes.tolist(), edges.tolist(), strict=False)):
        if v > node_cap or e > edge_cap:
            raise InputError(f"graph at position {i} exceeds the budget {budget}")
        if batch_n + v > node_cap or batch_e + e > edge_cap or batch_g + 1 > graph_cap:
            offsets.append(i)
            batch_n, batch_e, batch_g = v, e, 1
        else:
            batch_n, batch_e, batch_g = batch_n + v, batch_e + e, batch_g + 1
    if batch_g:
        offsets.append(len(nodes))
    return np.asarray(offsets, dtype=np.int64)
