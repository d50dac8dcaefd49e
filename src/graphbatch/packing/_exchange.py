"""Repair of dealt packs over a limit (`balanced_pack`; `step_fill`'s per-step path): one-for-one
exchanges between an over-full pack and a pack with room (`swap_repair`), then the graphs still
over a limit given back (`spill`). Packs are the rows of a grid of sorted-bin indices
(``-1`` = empty); loads are exact integer sums."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .._exact import share_keys
from ._dealing import row_chunks

__all__ = ["spill", "swap_repair"]


def _loads(
    bin_nodes: np.ndarray, bin_edges: np.ndarray, grid: np.ndarray
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per-pack (row) real nodes, edges and graphs of ``grid`` (int64), chunk by chunk;
    ``bin_nodes``/``bin_edges``: the sizes of the sorted bins the grid holds."""
    P = grid.shape[0]
    load_n, load_e = np.empty(P, np.int64), np.empty(P, np.int64)
    load_k = np.empty(P, np.int64)
    for p0, p1 in row_chunks(P, grid.shape[1]):
        sub = grid[p0:p1]
        present = sub >= 0
        safe = np.where(present, sub, 0)
        load_n[p0:p1] = np.where(present, bin_nodes[safe], 0).sum(axis=1)
        load_e[p0:p1] = np.where(present, bin_edges[safe], 0).sum(axis=1)
        load_k[p0:p1] = present.sum(axis=1)
    return load_n, load_e, load_k


def _spread(R: int, K: int) -> np.ndarray:
    """``K`` column indices evenly spread over ``0..R-1`` (both ends included), rounded down:
    ``np.linspace(0, R - 1, K).astype(int)`` in integers."""
    if K == 1:
        return np.zeros(1, np.int64)
    return np.arange(K, dtype=np.int64) * (R - 1) // (K - 1)


def swap_repair(
    bin_nodes: np.ndarray,
    bin_edges: np.ndarray,
    grid: np.ndarray,
    limits: tuple[int, int, int],
    rounds: int = 3,
    budget: int = 2_000_000,
    max_cols: int = 8,
) -> np.ndarray:
    """Exchange one graph between each over-limit pack and a pack with room, where one exchange
    brings the first within the limits and keeps the second within them. Each round looks at
    ``max_cols`` of the size ranks of both packs; ``budget`` bounds the candidate exchanges
    looked at together. ``grid``: packs (rows) of sorted-bin indices (``-1`` = empty) whose
    sizes are ``bin_nodes``/``bin_edges``; ``limits``: node, edge, graph capacities. In
    place."""
    node_cap, edge_cap, _ = limits
    load_n, load_e, _ = _loads(bin_nodes, bin_edges, grid)
    R = grid.shape[1]
    K = min(R, max_cols)
    for rnd in range(rounds):
        # a spread of K columns (graph size ranks), shifted each round
        cols = (_spread(R, K) + rnd) % R
        over = np.flatnonzero((load_n > node_cap) | (load_e > edge_cap))
        if over.size == 0:
            break
        # room of each pack, the smaller share of its capacities (exact keys); over-full packs
        # never partner
        slack = share_keys(node_cap - load_n, edge_cap - load_e, node_cap, edge_cap, "min")
        key = -slack
        key[over] = key.max() + 1  # last
        partners = np.argsort(key, kind="stable")[: over.size]
        ok = (slack[partners] > 0) & ~np.isin(partners, over)
        over, partners = over[ok], partners[ok]
        if over.size == 0:
            break
        chunk = max(1, budget // (K * K))
        swapped = 0
        for s0 in range(0, over.size, chunk):
            swapped += _swap_chunk(
                bin_nodes,
                bin_edges,
                grid,
                limits,
                cols,
                over[s0 : s0 + chunk],
                partners[s0 : s0 + chunk],
                (load_n, load_e),
            )
        if swapped == 0:
            break
    return grid


def _swap_chunk(
    bin_nodes: np.ndarray,
    bin_edges: np.ndarray,
    grid: np.ndarray,
    limits: tuple[int, int, int],
    cols: np.ndarray,
    over: np.ndarray,
    partners: np.ndarray,
    loads: tuple[NDArray[np.int64], NDArray[np.int64]],
) -> int:
    """One chunk of `swap_repair`: for each over-limit pack ``over[i]`` and its partner
    ``partners[i]``, the exchange among the columns ``cols`` with the smallest net move that
    brings the first within the limits and keeps the second within them, made in ``grid`` and
    in the packs' ``loads`` (real nodes, edges; in place). Returns the exchanges made."""
    node_cap, edge_cap, _ = limits
    load_n, load_e = loads
    over_grid, partner_grid = grid[over][:, cols], grid[partners][:, cols]
    over_has, partner_has = over_grid >= 0, partner_grid >= 0
    over_n = np.where(over_has, bin_nodes[np.maximum(over_grid, 0)], 0)
    over_e = np.where(over_has, bin_edges[np.maximum(over_grid, 0)], 0)
    partner_n = np.where(partner_has, bin_nodes[np.maximum(partner_grid, 0)], 0)
    partner_e = np.where(partner_has, bin_edges[np.maximum(partner_grid, 0)], 0)
    move_n = over_n[:, :, None] - partner_n[:, None, :]
    move_e = over_e[:, :, None] - partner_e[:, None, :]
    valid = (
        over_has[:, :, None]
        & partner_has[:, None, :]
        & ((load_n[over] - node_cap)[:, None, None] <= move_n)
        & ((load_e[over] - edge_cap)[:, None, None] <= move_e)
        & (move_n <= (node_cap - load_n[partners])[:, None, None])
        & (move_e <= (edge_cap - load_e[partners])[:, None, None])
    )
    # the exchange's net move, relative to the limits
    cost = share_keys(move_n, move_e, node_cap, edge_cap)
    flat = cost.reshape(cost.shape[0], -1)
    ok_flat = valid.reshape(valid.shape[0], -1)
    # the smallest valid move: invalid entries above every valid one
    top_cost = flat.max(initial=0) if flat.size else 0
    k = np.argmin(np.where(ok_flat, flat, top_cost + 1), axis=1)
    hit = ok_flat[np.arange(k.shape[0]), k]
    if not hit.any():
        return 0
    K = cols.shape[0]
    i, col_over, col_partner = np.flatnonzero(hit), k[hit] // K, k[hit] % K
    bin_over, bin_partner = over_grid[i, col_over], partner_grid[i, col_partner]
    grid[over[i], cols[col_over]] = bin_partner
    grid[partners[i], cols[col_partner]] = bin_over
    delta_n = bin_nodes[bin_over] - bin_nodes[bin_partner]
    delta_e = bin_edges[bin_over] - bin_edges[bin_partner]
    load_n[over[i]] -= delta_n
    load_e[over[i]] -= delta_e
    load_n[partners[i]] += delta_n
    load_e[partners[i]] += delta_e
    return int(i.size)


def spill(
    bin_nodes: np.ndarray, bin_edges: np.ndarray, grid: np.ndarray, limits: tuple[int, int, int]
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Give back graphs from packs over a limit. Returns (removed bins, grid, loads); ``grid``
    is changed in place. The packs over a limit are handled in chunks of rows (each pack's
    give-backs depend on that pack only)."""
    node_cap, edge_cap, graph_cap = limits
    load_n, load_e, load_k = _loads(bin_nodes, bin_edges, grid)
    bad_all = np.flatnonzero((load_n > node_cap) | (load_e > edge_cap) | (load_k > graph_cap))
    removed: list[np.ndarray] = []
    R = grid.shape[1]
    for b0, b1 in row_chunks(bad_all.shape[0], R):
        bad = bad_all[b0:b1]
        sub = grid[bad]
        present = sub >= 0
        safe = np.where(present, sub, 0)
        size_n = np.where(present, bin_nodes[safe], 0)
        size_e = np.where(present, bin_edges[safe], 0)
        rows = np.arange(bad.shape[0])
        for _ in range(R + 1):
            excess_n = load_n[bad] - node_cap
            excess_e = load_e[bad] - edge_cap
            over = (excess_n > 0) | (excess_e > 0) | (load_k[bad] > graph_cap)
            if not over.any():
                break
            cure = present & (size_n >= excess_n[:, None]) & (size_e >= excess_e[:, None])
            has = cure.any(axis=1)
            # smallest curing graph: rows go from large to small, take the last curing column
            last = R - 1 - np.argmax(cure[:, ::-1], axis=1)
            first = np.argmax(present, axis=1)
            col = np.where(has, last, first)
            row_at, col_at = rows[over], col[over]
            removed.append(sub[row_at, col_at])
            load_n[bad[row_at]] -= size_n[row_at, col_at]
            load_e[bad[row_at]] -= size_e[row_at, col_at]
            load_k[bad[row_at]] -= 1
            present[row_at, col_at] = False
            sub[row_at, col_at] = -1
        grid[bad] = sub
    out = np.concatenate(removed) if removed else np.zeros(0, np.int64)
    return out, grid, (load_n, load_e, load_k)
