"""Plain reference helpers for the packing tests (brute force, independent of the library)."""

from __future__ import annotations

from functools import cache


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
