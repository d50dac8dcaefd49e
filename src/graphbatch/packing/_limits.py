"""Limit search: the padded (max_nodes, max_edges) at which ``pack-lpf`` packs best.

The objective is the harmonic mean (HM) of node and edge efficiency of the packing that
``pack_bins`` (the packer of ``pack-lpf``) actually produces at the limits. Efficiency keeps
creeping up with the pack size (the padding node and the last partly filled graph weigh less in
larger packs), so "the maximum" is taken to a resolution ``tolerance``: every point whose HM is
within ``tolerance`` of the highest HM found is optimal, and the smallest of them (fewest nodes,
then edges) is *the optimum* (the tuple-packing paper, Section 2.5: "the smallest combination
that achieves a certain packing efficiency").

Search (deterministic, no timing involved):

1. *Scale ladder.* Node limits ``lo, 2 lo, 4 lo, ...`` from the smallest limit that holds the
   largest graph; at every node limit the edge limit follows the table's edge/node ratio (edges
   exactly filled at the node lower bound, and 1% more). The ladder covers packs of at least 64
   mean graphs and grows until doubling the node limit stops raising the best HM by more than
   ``tolerance / 2`` (the range adapts), and stops at the user's ``node_range``.
2. *Refinement* between the ladder neighbours of the knee and in the one other interval with
   the highest upper bound: ``grid`` node limits per interval (every integer when narrow) plus
   the limits where ``k`` mean graphs fill a pack exactly; then, at the best node limits, edge
   limits from 2% below to 4% above the ratio, widened while the best one is at their edge.
3. *Evaluation.* Points are estimated by packing a proportional sample of at most
   ``sample_graphs`` graphs (exact when the table is that small) and skipped where an upper bound
   (efficiency at the lower bound) cannot reach the optimal set; the ``exact_points`` best
   candidates under the rule above are
   then packed exactly on the whole table, and the optimum is chosen among exact records only.

``search_limits`` returns a `LimitRecords` list, best first; its ``interior`` says whether the
optimum lies strictly inside the searched node and edge ranges.

Every comparison is exact: efficiencies and harmonic means are rationals (records report them
rounded to float), the tolerance and edge slacks are read as decimals, and the refinement's
geometric and evenly spaced points are integer roots and roundings, so the search takes the
same path on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from .._exact import decimal
from .._sizes import GraphSizes, SizeHistogram
from ._greedy import batches_lower_bound
from ._limit_bounds import (
    check_search_args,
    even_points,
    geometric_points,
    limit_bounds,
    sample_counts,
)
from ._limit_records import (
    LimitRecord,
    LimitRecords,
    evaluate_limits,
    exact_record,
    exact_totals,
    harmonic_mean,
    make_record,
    optimal,
    ranked_records,
    size_key,
)
from ._pack import pack_bins

__all__ = ["search_limits", "evaluate_limits", "LimitRecords", "DEFAULT_TOLERANCE"]

#: HM resolution of the search: points within this of the best HM count as optimal.
DEFAULT_TOLERANCE = 0.002
#: Graphs packed per estimate (a proportional sample of the histogram).
DEFAULT_SAMPLE_GRAPHS = 32_768
#: Edge slack (fraction of the ratio-matched edge limit) tried at every node limit.
_EDGE_SLACK = tuple(Fraction(x, 1000) for x in (-20, -10, 0, 5, 10, 20, 40))


class _Search:
    """State of one search: the histogram, its sample, the evaluated points."""

    def __init__(
        self,
        hist: SizeHistogram,
        max_graphs: int | None,
        heuristic: str,
        method: str,
        tolerance: float,
        sample_graphs: int,
        e_lo: int,
        e_hi: int,
    ) -> None:
        self.hist = hist
        self.max_graphs = max_graphs
        self.heuristic, self.method, self.tolerance_exact = heuristic, method, decimal(tolerance)
        self.num = int(hist.count.sum())
        self.total_n, self.total_e = exact_totals(hist.n_node, hist.n_edge, hist.count)
        self.graph_cap = self.num if max_graphs is None else max_graphs - 1
        self.sample = sample_counts(hist.count, sample_graphs)
        self.sampled = int(self.sample.sum()) < self.num
        self.e_lo, self.e_hi = e_lo, e_hi
        self.est: dict[tuple[int, int], LimitRecord] = {}
        self.exact: dict[tuple[int, int], LimitRecord] = {}

    # -- bounds and points
    def packs_lb(self, max_nodes: int, max_edges: int) -> int:
        return batches_lower_bound(
            self.total_n, self.total_e, self.num, max_nodes - 1, max_edges, self.graph_cap
        )

    def aligned(self, lo: int, hi: int, points: int) -> list[int]:
        """Node limits strictly between ``lo`` and ``hi`` at which ``k`` graphs of mean size
        fill a pack exactly (``ceil(nodes / ceil(graphs / k)) + 1``; the sweet spots of
        tables with few distinct sizes), at most ``points`` of them, evenly spread in ``k``."""
        if self.total_n <= 0:
            return []
        # graphs of mean size (total_n / num) in lo - 1 and hi - 1 nodes, in integers
        k_lo = max(1, (lo - 1) * self.num // self.total_n)
        k_hi = (hi - 1) * self.num // self.total_n + 1
        ks = (
            sorted(set(even_points(k_lo, k_hi, min(points, k_hi - k_lo + 1))))
            if k_hi >= k_lo
            else []
        )
        out = set()
        for k in ks:
            p = -(-self.num // max(min(k, self.graph_cap), 1))
            max_nodes = -(-self.total_n // p) + 1
            if lo < max_nodes < hi:
                out.add(int(max_nodes))
        return sorted(out)

    def upper_bound(self, max_nodes: int, max_edges: int) -> Fraction:
        return harmonic_mean(
            make_record(
                self.total_n,
                self.total_e,
                self.packs_lb(max_nodes, max_edges),
                max_nodes,
                max_edges,
                None,
                False,
            )
        )

    def edge_limit(self, max_nodes: int, slack: Fraction) -> int:
        """Edge limit matched to the node limit: edges exactly filled at the node (or graph)
        lower bound, times ``1 + slack`` (exact), inside the edge range."""
        p0 = max(-(-self.total_n // (max_nodes - 1)), -(-self.num // self.graph_cap), 1)
        max_edges = math.ceil(self.total_e * (1 + Fraction(slack)) / p0) if self.total_e else 0
        return int(min(max(max_edges, self.e_lo), self.e_hi))

    # -- evaluation
    def estimate(self, max_nodes: int, max_edges: int) -> LimitRecord:
        key = (max_nodes, max_edges)
        if key in self.exact:
            return self.exact[key]
        if key not in self.est:
            if not self.sampled:
                return self.evaluate(max_nodes, max_edges)
            h = self.hist
            res = pack_bins(
                h.n_node,
                h.n_edge,
                self.sample,
                node_limit=max_nodes - 1,
                edge_limit=max_edges,
                graph_limit=self.graph_cap,
                heuristic=self.heuristic,
                method=self.method,
            )
            # packs over the bound scale with the table; the bound itself is exact
            over = Fraction((res.num_packs - res.lower_bound) * self.num, int(self.sample.sum()))
            packs = self.packs_lb(max_nodes, max_edges) + over
            self.est[key] = make_record(
                self.total_n, self.total_e, packs, max_nodes, max_edges, self.max_graphs, False
            )
        return self.est[key]

    def evaluate(self, max_nodes: int, max_edges: int) -> LimitRecord:
        key = (max_nodes, max_edges)
        if key not in self.exact:
            rec = exact_record(
                self.hist, max_nodes, max_edges, self.max_graphs, self.heuristic, self.method
            )
            self.exact[key] = rec
            self.est.pop(key, None)
        return self.exact[key]

    def points(self) -> list[LimitRecord]:
        return list(self.est.values()) + list(self.exact.values())

    # -- the rule
    def chosen(self, records: list[LimitRecord]) -> list[LimitRecord]:
        """Records optimal under the rule (`optimal`), smallest first."""
        return optimal(records, self.tolerance_exact)


def search_limits(
    sizes: GraphSizes,
    *,
    max_graphs: int | None = None,
    node_range: tuple[int, int] | None = None,
    edge_range: tuple[int, int] | None = None,
    grid: int = 8,
    refine: bool = True,
    heuristic: str = "product",
    method: str = "auto",
    tolerance: float = DEFAULT_TOLERANCE,
    exact_points: int = 4,
    sample_graphs: int = DEFAULT_SAMPLE_GRAPHS,
) -> LimitRecords:
    """Search the padded (node, edge) limits at which ``pack-lpf`` packs ``sizes`` best.

    Returns a `LimitRecords` list, best first. Each record: ``max_nodes`` (padded, incl. the
    padding node), ``max_edges``, ``max_graphs`` (padded, incl. the padding graph, or
    ``None``), ``node_eff``, ``edge_eff`` (real / padded, 0-1), ``harmonic_mean``,
    ``num_packs`` and ``exact`` (packed on the whole table; else estimated from a sample).
    ``records[0]`` is exact and is the optimum: the smallest limits whose HM is within
    ``tolerance`` of the best exact HM; it equals ``graphbatch.plan(sizes, "pack-lpf",
    budget=(max_nodes, max_edges, max_graphs or len(sizes) + 1), heuristic=heuristic,
    method=method)``. Exact records within the tolerance come first (smallest first), then the
    other exact records, then the estimates, each by decreasing HM.

    ``node_range``/``edge_range``: inclusive bounds on the padded limits (default: from the
    smallest limit that holds the largest graph, growing until the optimum is interior).
    ``grid``: node limits per refinement interval; ``refine=False`` keeps the ladder only.
    See the module docstring for the search.
    """
    max_graphs = check_search_args(sizes, grid, exact_points, sample_graphs, tolerance, max_graphs)
    hist = sizes.histogram()
    n_lo, n_hi, e_lo, e_hi = limit_bounds(hist, node_range, edge_range)
    s = _Search(
        hist, max_graphs, heuristic, method, float(tolerance), int(sample_graphs), e_lo, e_hi
    )
    # 1. scale ladder, growing until doubling stops paying (or the range ends)
    ladder, recs = _ladder(s, hist, n_lo, n_hi, max_graphs)
    # 2. refinement: node limits between ladder neighbours, then edge slack at the best ones
    edges = _EdgeRefiner(s)
    if refine and len(ladder) > 1:
        _refine_nodes(s, ladder, ladder.index(s.chosen(recs)[0]["max_nodes"]), int(grid))
    if refine:
        tops: list[int] = []
        for r in sorted(s.points(), key=lambda r: -harmonic_mean(r)):
            if r["max_nodes"] not in tops:
                tops.append(r["max_nodes"])
        for max_nodes in sorted({r["max_nodes"] for r in s.chosen(s.points())})[:2] + tops[:2]:
            edges.refine(max_nodes)
    # 3. exact packing of the best candidates; the optimum is chosen among exact records
    _pack_exactly(s, exact_points, edges if refine else None)
    return ranked_records(
        list(s.exact.values()), list(s.est.values()), tolerance, s.tolerance_exact
    )


_ZERO, _ONE_PC = Fraction(0), Fraction(1, 100)


def _best_at(
    s: _Search, max_nodes: int, slacks: Sequence[Fraction] = (_ZERO, _ONE_PC)
) -> LimitRecord:
    """The best estimate at node limit ``max_nodes`` over the edge ``slacks``."""
    return max(
        (s.estimate(max_nodes, s.edge_limit(max_nodes, d)) for d in slacks), key=harmonic_mean
    )


def _ladder(
    s: _Search, hist: SizeHistogram, n_lo: int, n_hi: int, max_graphs: int | None
) -> tuple[list[int], list[LimitRecord]]:
    """``(ladder, records)``: node limits doubling from ``n_lo``, with their best estimates,
    until doubling stops paying past the extent (packs of at least 64 mean graphs, or twice
    the most a graph cap allows) or the range (capped at every graph in one pack) ends."""
    # a pack never needs more than every graph: cap the ladder there
    n_cap = min(n_hi, max(n_lo, s.total_n + 1))
    max_n = int(hist.n_node.max())
    extent = 64 * max(-(-s.total_n // s.num), 1) + 1
    if max_graphs is not None:
        extent = min(extent, 2 * (s.graph_cap * max_n + 1))
    extent = min(n_cap, max(extent, n_lo))
    ladder: list[int] = []
    recs: list[LimitRecord] = []
    max_nodes = n_lo
    while True:
        ladder.append(max_nodes)
        recs.append(_best_at(s, max_nodes))
        if max_nodes >= n_cap:
            break
        if len(recs) >= 3 and max_nodes >= extent:
            prev_best = max(harmonic_mean(r) for r in recs[:-2])
            gain = max(harmonic_mean(recs[-1]), harmonic_mean(recs[-2])) - prev_best
            if gain <= s.tolerance_exact / 2:
                break
        max_nodes = min(2 * max_nodes, n_cap)
    return ladder, recs


def _refine_nodes(s: _Search, ladder: list[int], i: int, grid: int) -> None:
    """Estimates at node limits between ladder neighbours: the intervals next to the knee
    ``ladder[i]`` and the one other whose upper bound is highest (efficiency is not smooth in
    the node limit when packs hold few graphs), skipping limits that cannot reach the optimal
    set."""
    spans = [(ladder[j], ladder[j + 1]) for j in range(len(ladder) - 1)]
    cands = [
        sorted(
            set(
                list(range(a + 1, b))
                if b - a <= 4 * grid
                else sorted(set(geometric_points(a, b, grid + 2)))[1:-1]
            )
            | set(s.aligned(a, b, grid))
        )
        for a, b in spans
    ]
    ubs = [
        max(
            (s.upper_bound(max_nodes, s.edge_limit(max_nodes, _ZERO)) for max_nodes in c),
            default=_ZERO,
        )
        for c in cands
    ]
    near = [j for j in (i - 1, i) if 0 <= j < len(spans)]
    others = sorted((j for j in range(len(spans)) if j not in near), key=lambda j: -ubs[j])
    for j in near + others[:1]:
        for max_nodes in cands[j]:
            top = max(harmonic_mean(r) for r in s.points())
            if s.upper_bound(max_nodes, s.edge_limit(max_nodes, _ZERO)) < top - s.tolerance_exact:
                continue  # cannot reach the optimal set
            _best_at(s, max_nodes, (_ZERO, _ONE_PC))


class _EdgeRefiner:
    """Edge slack around the ratio at a node limit, each node limit once."""

    def __init__(self, s: _Search) -> None:
        self.s = s
        self.done: set[int] = set()

    def refine(self, max_nodes: int) -> None:
        """Estimates at node limit ``max_nodes`` over the edge slacks, widened while the best is on
        an edge of the slacks tried (so the optimum is interior in the edge limit)."""
        if max_nodes in self.done:
            return
        self.done.add(max_nodes)
        s = self.s
        slacks = list(_EDGE_SLACK)
        while True:
            rs = [s.estimate(max_nodes, s.edge_limit(max_nodes, d)) for d in slacks]
            j = max(range(len(rs)), key=lambda k: harmonic_mean(rs[k]))
            if 0 < j < len(rs) - 1 or len(slacks) > 16 or slacks[0] <= Fraction(-1, 2):
                return
            slacks = (
                [2 * slacks[0] - _ONE_PC, *slacks]
                if j == 0
                else [*slacks, 2 * slacks[-1] + _ONE_PC]
            )


def _pack_exactly(s: _Search, exact_points: int, edges: _EdgeRefiner | None) -> None:
    """Exact packing of the best estimate, then of estimates within the tolerance of the best
    exact record and smaller than the chosen one (up to ``2 * exact_points`` exact records),
    refining the edge slack at the chosen node limit (``edges``) once; at most six rounds."""
    pool = sorted(s.points(), key=lambda r: -harmonic_mean(r))
    s.evaluate(pool[0]["max_nodes"], pool[0]["max_edges"])
    for _ in range(6):
        exact = list(s.exact.values())
        top = max(harmonic_mean(r) for r in exact)
        head = s.chosen(exact)[0]
        cands = sorted(
            (
                r
                for r in s.points()
                if not r["exact"]
                and harmonic_mean(r) >= top - s.tolerance_exact
                and size_key(r) < size_key(head)
            ),
            key=size_key,
        )
        if cands and len(s.exact) < 2 * exact_points:
            for r in cands[: max(1, exact_points - 1)]:
                s.evaluate(r["max_nodes"], r["max_edges"])
            continue
        if edges is not None and head["max_nodes"] not in edges.done:
            edges.refine(head["max_nodes"])  # then look again
            continue
        break
