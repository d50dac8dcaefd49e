"""Limit search: node and edge efficiency of histogram packing over a grid of (node, edge)
limits (tuple-packing paper, Section 2.5 and Figure 5, as data)."""

from __future__ import annotations

import numpy as np

from .._sizes import GraphSizes
from ._pack import pack_bins

__all__ = ["search_limits", "evaluate_limits"]


def _axis(lo: int, hi: int, points: int) -> np.ndarray:
    return np.unique(np.rint(np.linspace(lo, hi, max(points, 1))).astype(np.int64))


def _check_range(value, name: str):
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair (low, high) of integers, got {value!r}") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"{name} must satisfy 1 <= low <= high, got {value!r}")
    return lo, hi


def evaluate_limits(hist, max_nodes: int, max_edges: int, max_graphs: int | None, *,
                    heuristic: str = "product", method: str = "histogram") -> dict:
    """One record for padded limits ``max_nodes`` (incl. one padding node), ``max_edges`` and
    ``max_graphs`` (incl. one padding graph; ``None`` = no cap): the packs histogram packing needs
    and the efficiencies real / padded."""
    total = int(hist.count.sum())
    cap_g = total if max_graphs is None else int(max_graphs) - 1
    res = pack_bins(hist.n_node, hist.n_edge, hist.count, node_limit=int(max_nodes) - 1,
                    edge_limit=int(max_edges), graph_limit=max(cap_g, 1), heuristic=heuristic,
                    method=method)
    p = res.num_packs
    nodes = float((hist.n_node * hist.count).sum())
    edges = float((hist.n_edge * hist.count).sum())
    ne = nodes / (p * max_nodes) if p else 1.0
    ee = edges / (p * max_edges) if p and max_edges else 1.0
    hm = 2 * ne * ee / (ne + ee) if ne + ee > 0 else 0.0
    return {"max_nodes": int(max_nodes), "max_edges": int(max_edges),
            "max_graphs": None if max_graphs is None else int(max_graphs),
            "node_eff": ne, "edge_eff": ee, "harmonic_mean": hm, "num_packs": p}


def search_limits(
    sizes: GraphSizes,
    *,
    max_graphs: int | None = None,
    node_range: tuple[int, int] | None = None,
    edge_range: tuple[int, int] | None = None,
    grid: int = 16,
    refine: bool = False,
    heuristic: str = "product",
    method: str = "histogram",
) -> list[dict]:
    """Evaluate a grid of padded (node, edge) limits; records best first.

    Each record: ``max_nodes`` (padded, incl. the padding node), ``max_edges``, ``max_graphs``
    (padded, incl. the padding graph, or ``None``), ``node_eff``, ``edge_eff`` (real / padded,
    fractions 0-1), ``harmonic_mean`` and ``num_packs``. Ranges are inclusive ``(low, high)``;
    by default ``low`` is the smallest limit that holds the largest graph and ``high`` four times
    it. ``grid`` points per axis (all integers when the range is narrower). Limits that cannot
    hold the largest graph are left out. ``refine=True`` adds a grid with a step of one coarse
    step / ``grid`` around the best point. Sorted by harmonic mean (then smaller limits first).
    Packing is longest-pack-first histogram packing (``method="auto"`` adds balanced dealing).
    """
    if not isinstance(sizes, GraphSizes):
        raise TypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    grid = int(grid)
    if grid < 1:
        raise ValueError(f"grid must be >= 1 points per axis, got {grid}")
    if max_graphs is not None:
        if isinstance(max_graphs, bool) or int(max_graphs) != max_graphs or max_graphs < 2:
            raise ValueError(f"max_graphs must be an integer >= 2 (one graph is padding), "
                             f"got {max_graphs!r}")
        max_graphs = int(max_graphs)
    hist = sizes.histogram()
    need_n = int(hist.n_node.max()) + 1
    need_e = max(int(hist.n_edge.max()), 1)
    n_lo, n_hi = _check_range(node_range, "node_range") if node_range is not None else \
        (need_n, 4 * need_n)
    e_lo, e_hi = _check_range(edge_range, "edge_range") if edge_range is not None else \
        (need_e, 4 * need_e)
    if n_hi < need_n or e_hi < need_e:
        raise ValueError(
            f"limits up to {n_hi} nodes / {e_hi} edges cannot hold the largest graph "
            f"({need_n - 1} nodes + 1 padding node, {need_e} edges)"
        )
    seen: dict[tuple[int, int], dict] = {}

    def run(nodes_axis, edges_axis):
        for mn in nodes_axis.tolist():
            if mn < need_n:
                continue
            for me in edges_axis.tolist():
                if me < need_e or (mn, me) in seen:
                    continue
                seen[(mn, me)] = evaluate_limits(hist, mn, me, max_graphs,
                                                 heuristic=heuristic, method=method)

    n_axis, e_axis = _axis(n_lo, n_hi, grid), _axis(e_lo, e_hi, grid)
    run(n_axis, e_axis)
    if refine and seen:
        best = max(seen.values(), key=lambda r: r["harmonic_mean"])
        dn = max(1, int(np.ceil((n_hi - n_lo) / max(grid - 1, 1))))
        de = max(1, int(np.ceil((e_hi - e_lo) / max(grid - 1, 1))))
        run(_axis(max(n_lo, best["max_nodes"] - dn), min(n_hi, best["max_nodes"] + dn), grid),
            _axis(max(e_lo, best["max_edges"] - de), min(e_hi, best["max_edges"] + de), grid))
    return sorted(seen.values(),
                  key=lambda r: (-r["harmonic_mean"], r["max_nodes"] + r["max_edges"],
                                 r["max_nodes"]))
