"""Step fill: the greedy fill for data-parallel plans, ``ranks`` evenly filled batches a step."""

from __future__ import annotations

import numpy as np

from .._budget import Budget
from ._balanced import _swap_repair
from ._greedy import batches_lower_bound, index_dtype

__all__ = ["step_fill"]

#: Graphs per window of prefix sums (memory O(window), not O(graphs)).
_WINDOW = 1 << 20


def step_fill(nodes: np.ndarray, edges: np.ndarray, budget: Budget, ranks: int,
              fill: float = 0.99, steps: int | None = None, *, return_totals: bool = False):
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

    ``nodes``/``edges`` may be any integer dtype (e.g. int32); sums are int64. Memory beyond the
    result is one window of prefix sums (``_WINDOW`` graphs) and one step.

    Returns ``(perm, offsets)``: positions in batch order (int32 when fewer than 2**31 graphs,
    else int64) and int64 batch boundaries; with ``return_totals`` also the int64 real node and
    edge totals of each batch. The number of batches is a multiple of ``ranks`` (empty batches
    only when there are fewer graphs than ``ranks`` in total)."""
    m, r = int(nodes.shape[0]), int(ranks)
    cap_n, cap_e, cap_g = budget.node_capacity, budget.edge_capacity, budget.graph_capacity
    tot_n = int(nodes.sum(dtype=np.int64))
    tot_e = int(edges.sum(dtype=np.int64))
    perm = np.empty(m, index_dtype(m))
    # per step: graphs, real nodes, real edges of its `ranks` batches (grown by doubling)
    per_step = np.zeros((64, 3, r), np.int64)
    n_steps = 0
    # steps needed at `fill` of the capacity; every step then gets an even share of what is left
    if steps is None:
        steps = batches_lower_bound(tot_n, tot_e, m, int(r * cap_n * fill),
                                    int(r * cap_e * fill), r * cap_g)
    reach = r * cap_g + 1  # a step never spans more graphs than this
    a = hi = 0  # window: cn[a..hi] as wn[0..hi-a]
    wn = we = np.zeros(1, np.int64)
    pos = done = 0
    while pos < m:
        if pos + reach > hi and hi < m:  # slide the window of prefix sums to start at pos
            base_n, base_e = int(wn[pos - a]), int(we[pos - a])  # cn[pos]: pos is in the window
            a, hi = pos, min(m, pos + max(_WINDOW, reach))
            wn = np.empty(hi - a + 1, np.int64)
            we = np.empty(hi - a + 1, np.int64)
            wn[0], we[0] = base_n, base_e
            np.cumsum(nodes[a:hi], out=wn[1:], dtype=np.int64)
            np.cumsum(edges[a:hi], out=we[1:], dtype=np.int64)
            wn[1:] += base_n
            we[1:] += base_e
        cpos_n, cpos_e = int(wn[pos - a]), int(we[pos - a])
        left = max(steps - n_steps, 1)
        # integer targets: a float key would convert the whole prefix array on every call
        t_n = cpos_n + int(min(r * cap_n * fill, (tot_n - cpos_n) / left))
        t_e = cpos_e + int(min(r * cap_e * fill, (tot_e - cpos_e) / left))
        # within the window (a step's end lies before hi, or the graph cap below binds first)
        j = min(a + int(np.searchsorted(wn, t_n, "right")) - 1,
                a + int(np.searchsorted(we, t_e, "right")) - 1,
                pos + min(r * cap_g, -(-(m - pos) // left)), m)
        if left == 1:
            j = m if (tot_n - cpos_n <= r * cap_n * fill and tot_e - cpos_e <= r * cap_e * fill
                      and m - pos <= r * cap_g) else j
        j = max(j, min(pos + r, m))
        if 0 < m - j < r:  # leave the last step at least `ranks` graphs
            j = max(pos + 1, m - r)
        while True:
            ln = nodes[pos:j].astype(np.int64)
            le = edges[pos:j].astype(np.int64)
            share = ln / max(cap_n, 1) + le / max(cap_e, 1)
            srt = np.argsort(-share, kind="stable")  # positions relative to pos
            t = np.arange(srt.shape[0])
            row, col = t // r, t % r
            batch = np.where(row % 2 == 0, col, r - 1 - col)
            grid = np.full((r, int(row.max()) + 1), -1, np.int64)
            grid[batch, row] = t
            sn, se = ln[srt], le[srt]
            for repaired in (False, True):
                present = grid >= 0
                safe = np.where(present, grid, 0)
                bn = np.where(present, sn[safe], 0).sum(axis=1)
                be = np.where(present, se[safe], 0).sum(axis=1)
                if repaired or ((bn <= cap_n).all() and (be <= cap_e).all()):
                    break  # (the repair leaves a grid without over-full batches as it is)
                # one-for-one exchanges bring over-full batches within the shape
                grid = _swap_repair(sn, se, grid, (cap_n, cap_e, cap_g))
            bg = present.sum(axis=1)
            if ((bn <= cap_n).all() and (be <= cap_e).all() and (bg <= cap_g).all()) \
                    or j - pos <= 1:
                break
            # shorten the step; its last graphs go to the following steps
            j = pos + max(1, min(j - pos - 1, int((j - pos) * 0.98)))
        placed = srt[grid[present]] + pos
        perm[done:done + placed.shape[0]] = placed
        done += placed.shape[0]
        if n_steps == per_step.shape[0]:
            per_step = np.concatenate([per_step, np.zeros_like(per_step)])
        per_step[n_steps] = (bg, bn, be)
        n_steps += 1
        pos = j
    per_step = per_step[:n_steps]
    offsets = np.zeros(n_steps * r + 1, np.int64)
    np.cumsum(per_step[:, 0].reshape(-1), out=offsets[1:])
    if return_totals:
        return perm, offsets, per_step[:, 1].reshape(-1), per_step[:, 2].reshape(-1)
    return perm, offsets
