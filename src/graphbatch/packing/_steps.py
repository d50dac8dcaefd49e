"""Step fill: the greedy fill for data-parallel plans, ``ranks`` evenly filled batches a step."""

from __future__ import annotations

import numpy as np

from .._budget import Budget
from ._balanced import _swap_repair
from ._greedy import batches_lower_bound

__all__ = ["step_fill"]


def step_fill(nodes: np.ndarray, edges: np.ndarray, budget: Budget, ranks: int,
              fill: float = 0.99, steps: int | None = None):
    """Greedy fill by steps of ``ranks`` batches, for data-parallel plans.

    Consecutive graphs (in the given order) make up a step while they fit ``fill`` of the step's
    capacity (``ranks`` times the budget's real capacities); within the step they are dealt,
    largest share of the capacities first, in snake order over the ``ranks`` batches, so the
    batches of a step are filled evenly. A step whose dealt batches do not fit the budget is
    shortened until they do. Every step but possibly the last holds ``ranks`` non-empty batches;
    the last holds at least ``min(ranks, graphs)`` graphs spread over its batches.

    ``steps`` (default: the fewest at ``fill``) is the number of steps aimed at; a step that
    had to be shortened leaves its graphs to the following ones, and graphs left after the last
    planned step make further steps.

    Returns ``(perm, offsets)``: positions in batch order and batch boundaries; the number of
    batches is a multiple of ``ranks`` (empty batches only when there are fewer graphs than
    ``ranks`` in total)."""
    nodes = np.asarray(nodes, np.int64)
    edges = np.asarray(edges, np.int64)
    m, r = nodes.shape[0], int(ranks)
    cap_n, cap_e, cap_g = budget.node_capacity, budget.edge_capacity, budget.graph_capacity
    cn = np.concatenate([[0], np.cumsum(nodes)])
    ce = np.concatenate([[0], np.cumsum(edges)])
    share = nodes / max(cap_n, 1) + edges / max(cap_e, 1)
    perms: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    # steps needed at `fill` of the capacity; every step then gets an even share of what is left
    if steps is None:
        steps = batches_lower_bound(int(cn[-1]), int(ce[-1]), m, int(r * cap_n * fill),
                                    int(r * cap_e * fill), r * cap_g)
    pos = 0
    while pos < m:
        left = max(steps - len(perms), 1)
        # integer targets: a float key would convert the whole prefix array on every call
        t_n = int(cn[pos]) + int(min(r * cap_n * fill, (int(cn[-1]) - int(cn[pos])) / left))
        t_e = int(ce[pos]) + int(min(r * cap_e * fill, (int(ce[-1]) - int(ce[pos])) / left))
        j = min(int(np.searchsorted(cn, t_n, "right")) - 1,
                int(np.searchsorted(ce, t_e, "right")) - 1,
                pos + min(r * cap_g, -(-(m - pos) // left)), m)
        if left == 1:
            j = m if (cn[-1] - cn[pos] <= r * cap_n * fill and ce[-1] - ce[pos] <= r * cap_e * fill
                      and m - pos <= r * cap_g) else j
        j = max(j, min(pos + r, m))
        if 0 < m - j < r:  # leave the last step at least `ranks` graphs
            j = max(pos + 1, m - r)
        while True:
            idx = np.arange(pos, j)
            srt = idx[np.argsort(-share[idx], kind="stable")]
            t = np.arange(srt.shape[0])
            row, col = t // r, t % r
            batch = np.where(row % 2 == 0, col, r - 1 - col)
            grid = np.full((r, int(row.max()) + 1), -1, np.int64)
            grid[batch, row] = t
            # one-for-one exchanges bring over-full batches within the shape
            grid = _swap_repair(nodes[srt], edges[srt], grid, (cap_n, cap_e, cap_g))
            present = grid >= 0
            safe = np.where(present, grid, 0)
            bn = np.where(present, nodes[srt][safe], 0).sum(axis=1)
            be = np.where(present, edges[srt][safe], 0).sum(axis=1)
            bg = present.sum(axis=1)
            if ((bn <= cap_n).all() and (be <= cap_e).all() and (bg <= cap_g).all()) \
                    or j - pos <= 1:
                break
            # shorten the step; its last graphs go to the following steps
            j = pos + max(1, min(j - pos - 1, int((j - pos) * 0.98)))
        perms.append(srt[grid[present]])
        counts.append(bg)
        pos = j
    if not perms:
        return np.zeros(0, np.int64), np.zeros(1, np.int64)
    perm = np.concatenate(perms).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)
    return perm, offsets
