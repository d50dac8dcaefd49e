"""Records of the limit search (`search_limits`): one record per padded ``(max_nodes,
max_edges)`` point, with its node and edge efficiency and their harmonic mean (HM), exact (a
`Fraction`) for the search's comparisons and reported as floats. `evaluate_limits` packs one
point exactly; `optimal` is the search's rule; `ranked_records` orders its records, best
first."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._sizes import SizeHistogram
from ._pack import pack_bins

__all__ = [
    "LimitRecord",
    "LimitRecords",
    "evaluate_limits",
    "exact_record",
    "exact_totals",
    "harmonic_mean",
    "make_record",
    "optimal",
    "ranked_records",
    "size_key",
]


class LimitRecords(list[dict[str, Any]]):
    """Records of a limit search, best first (a plain ``list`` of dicts), with a summary.

    ``node_range`` / ``edge_range``: the inclusive ranges the search covered; ``interior``:
    whether the optimum (``self[0]``) lies strictly inside both (not on a searched edge);
    ``tolerance``: the HM resolution; ``exact_points`` / ``estimated_points``: records packed
    on the whole table / estimated from a sample.
    """

    def __init__(
        self,
        records: Sequence[dict[str, Any]],
        *,
        node_range: tuple[int, int],
        edge_range: tuple[int, int],
        interior: bool,
        tolerance: float,
    ) -> None:
        super().__init__(records)
        self.node_range = node_range
        self.edge_range = edge_range
        self.interior = bool(interior)
        self.tolerance = float(tolerance)

    @property
    def exact_points(self) -> int:
        return sum(1 for r in self if r.get("exact"))

    @property
    def estimated_points(self) -> int:
        return len(self) - self.exact_points

    def summary(self) -> str:
        """One line: the optimum, whether it is interior, the ranges and the point counts."""
        if not self:
            return "no limits evaluated"
        b = self[0]
        where = "interior" if self.interior else "ON THE EDGE of the searched range"
        graphs = "" if b["max_graphs"] is None else f" / {b['max_graphs']} graphs"
        return (
            f"optimum {b['max_nodes']} nodes / {b['max_edges']} edges{graphs}: "
            f"node {100 * b['node_eff']:.2f}%, edge {100 * b['edge_eff']:.2f}%, "
            f"harmonic mean {100 * b['harmonic_mean']:.2f}% ({where}; nodes "
            f"{self.node_range[0]}..{self.node_range[1]}, edges {self.edge_range[0]}.."
            f"{self.edge_range[1]}; {self.exact_points} exact, {self.estimated_points} "
            f"estimated points; tolerance {100 * self.tolerance:.2f} pp)"
        )


class LimitRecord(dict[str, Any]):
    """A limit record (a plain dict to its readers) carrying its exact harmonic mean
    (``hm``, a `Fraction`) for the search's comparisons."""

    hm: Fraction


def make_record(
    total_n: int,
    total_e: int,
    packs: int | Fraction,
    max_nodes: int,
    max_edges: int,
    max_graphs: int | None,
    exact: bool,
) -> LimitRecord:
    """The record of ``packs`` packs (an int, or a `Fraction` for estimates): efficiencies and
    their harmonic mean exact, reported as floats (correctly rounded)."""
    packs_exact = Fraction(packs)
    one = Fraction(1)
    node_eff = Fraction(int(total_n)) / (packs_exact * int(max_nodes)) if packs_exact > 0 else one
    edge_eff = (
        Fraction(int(total_e)) / (packs_exact * int(max_edges))
        if packs_exact > 0 and max_edges > 0
        else one
    )
    hm = 2 * node_eff * edge_eff / (node_eff + edge_eff) if node_eff + edge_eff > 0 else Fraction(0)
    rec = LimitRecord(
        {
            "max_nodes": int(max_nodes),
            "max_edges": int(max_edges),
            "max_graphs": None if max_graphs is None else int(max_graphs),
            "node_eff": float(node_eff),
            "edge_eff": float(edge_eff),
            "harmonic_mean": float(hm),
            "num_packs": -(-packs_exact.numerator // packs_exact.denominator),
            "exact": bool(exact),
        }
    )
    rec.hm = hm
    return rec


def harmonic_mean(r: LimitRecord) -> Fraction:
    """A record's exact harmonic mean."""
    return r.hm


def evaluate_limits(
    hist: SizeHistogram,
    max_nodes: int,
    max_edges: int,
    max_graphs: int | None,
    *,
    heuristic: str = "product",
    method: str = "auto",
) -> dict[str, Any]:
    """One exact record for padded limits ``max_nodes`` (incl. one padding node),
    ``max_edges`` and ``max_graphs`` (incl. one padding graph; ``None`` = no cap): the packs
    ``pack_bins`` needs on the whole histogram and the efficiencies real / padded. Equals
    ``graphbatch.plan(sizes, "pack-lpf", budget=(max_nodes, max_edges, max_graphs or N + 1),
    method=method)``."""
    return exact_record(hist, max_nodes, max_edges, max_graphs, heuristic, method)


def exact_record(
    hist: SizeHistogram,
    max_nodes: int,
    max_edges: int,
    max_graphs: int | None,
    heuristic: str,
    method: str,
) -> LimitRecord:
    """`evaluate_limits`, as the search's `LimitRecord`."""
    total = int(hist.count.sum())
    graph_cap = total if max_graphs is None else int(max_graphs) - 1
    res = pack_bins(
        hist.n_node,
        hist.n_edge,
        hist.count,
        node_limit=int(max_nodes) - 1,
        edge_limit=int(max_edges),
        graph_limit=max(graph_cap, 1),
        heuristic=heuristic,
        method=method,
    )
    total_n, total_e = exact_totals(hist.n_node, hist.n_edge, hist.count)
    return make_record(total_n, total_e, res.num_packs, max_nodes, max_edges, max_graphs, True)


def exact_totals(n: np.ndarray, e: np.ndarray, count: np.ndarray) -> tuple[int, int]:
    """Exact Python-int totals (no int64 overflow)."""
    return (
        sum(int(a) * int(c) for a, c in zip(n.tolist(), count.tolist(), strict=False)),
        sum(int(a) * int(c) for a, c in zip(e.tolist(), count.tolist(), strict=False)),
    )


def size_key(r: LimitRecord) -> tuple[int, int, Fraction]:
    return (r["max_nodes"], r["max_edges"], -harmonic_mean(r))


def optimal(records: Sequence[LimitRecord], tolerance: Fraction) -> list[LimitRecord]:
    """Records optimal under the search's rule (HM within ``tolerance`` of the best HM),
    smallest first."""
    if not records:
        return []
    top = max(harmonic_mean(r) for r in records)
    ok = [r for r in records if harmonic_mean(r) >= top - tolerance]
    return sorted(ok, key=size_key)


def ranked_records(
    exact: list[LimitRecord],
    estimates: Sequence[LimitRecord],
    tolerance: float,
    tolerance_exact: Fraction,
) -> LimitRecords:
    """The records, best first: exact ones within the tolerance (smallest first), the other
    exact ones, then the ``estimates`` (each by decreasing HM), and whether the optimum is
    interior to the limits tried. ``tolerance_exact``: ``tolerance`` read as a decimal."""
    ok = optimal(exact, tolerance_exact)
    ok_keys = {(r["max_nodes"], r["max_edges"]) for r in ok}
    rest_exact = sorted(
        (r for r in exact if (r["max_nodes"], r["max_edges"]) not in ok_keys),
        key=lambda r: (-harmonic_mean(r), *size_key(r)),
    )
    estimated = sorted(estimates, key=lambda r: (-harmonic_mean(r), *size_key(r)))
    out = ok + rest_exact + estimated
    best = out[0]
    all_n = [r["max_nodes"] for r in out]
    same_n = [r["max_edges"] for r in out if r["max_nodes"] == best["max_nodes"]]
    interior = min(all_n) < best["max_nodes"] < max(all_n) and min(same_n) < best[
        "max_edges"
    ] < max(same_n)
    e_all = [r["max_edges"] for r in out]
    return LimitRecords(
        out,
        node_range=(min(all_n), max(all_n)),
        edge_range=(min(e_all), max(e_all)),
        interior=interior,
        tolerance=tolerance,
    )
