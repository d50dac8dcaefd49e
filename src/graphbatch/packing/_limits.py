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
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._exact import decimal, fits_int64
from .._sizes import GraphSizes, SizeHistogram
from ._greedy import batches_lower_bound
from ._pack import pack_bins

__all__ = ["search_limits", "evaluate_limits", "LimitRecords", "DEFAULT_TOLERANCE"]

#: HM resolution of the search: points within this of the best HM count as optimal.
DEFAULT_TOLERANCE = 0.002
#: Graphs packed per estimate (a proportional sample of the histogram).
DEFAULT_SAMPLE_GRAPHS = 32_768
#: Largest limit the search considers (keeps every product and sum inside int64).
MAX_LIMIT = 2**40
#: Edge slack (fraction of the ratio-matched edge limit) tried at every node limit.
_EDGE_SLACK = tuple(Fraction(x, 1000) for x in (-20, -10, 0, 5, 10, 20, 40))


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


class _Record(dict[str, Any]):
    """A limit record (a plain dict to its readers) carrying its exact harmonic mean
    (``hm``, a `Fraction`) for the search's comparisons."""

    hm: Fraction


def _record(
    n_tot: int,
    e_tot: int,
    packs: int | Fraction,
    max_nodes: int,
    max_edges: int,
    max_graphs: int | None,
    exact: bool,
) -> _Record:
    """The record of ``packs`` packs (an int, or a `Fraction` for estimates): efficiencies and
    their harmonic mean exact, reported as floats (correctly rounded)."""
    fp = Fraction(packs)
    one = Fraction(1)
    ne = Fraction(int(n_tot)) / (fp * int(max_nodes)) if fp > 0 else one
    ee = Fraction(int(e_tot)) / (fp * int(max_edges)) if fp > 0 and max_edges > 0 else one
    hm = 2 * ne * ee / (ne + ee) if ne + ee > 0 else Fraction(0)
    rec = _Record(
        {
            "max_nodes": int(max_nodes),
            "max_edges": int(max_edges),
            "max_graphs": None if max_graphs is None else int(max_graphs),
            "node_eff": float(ne),
            "edge_eff": float(ee),
            "harmonic_mean": float(hm),
            "num_packs": -(-fp.numerator // fp.denominator),
            "exact": bool(exact),
        }
    )
    rec.hm = hm
    return rec


def _hm(r: _Record) -> Fraction:
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
    return _exact_record(hist, max_nodes, max_edges, max_graphs, heuristic, method)


def _exact_record(
    hist: SizeHistogram,
    max_nodes: int,
    max_edges: int,
    max_graphs: int | None,
    heuristic: str,
    method: str,
) -> _Record:
    """`evaluate_limits`, as the search's `_Record`."""
    total = int(hist.count.sum())
    cap_g = total if max_graphs is None else int(max_graphs) - 1
    res = pack_bins(
        hist.n_node,
        hist.n_edge,
        hist.count,
        node_limit=int(max_nodes) - 1,
        edge_limit=int(max_edges),
        graph_limit=max(cap_g, 1),
        heuristic=heuristic,
        method=method,
    )
    n_tot, e_tot = _totals(hist.n_node, hist.n_edge, hist.count)
    return _record(n_tot, e_tot, res.num_packs, max_nodes, max_edges, max_graphs, True)


def _totals(n: np.ndarray, e: np.ndarray, count: np.ndarray) -> tuple[int, int]:
    """Exact Python-int totals (no int64 overflow)."""
    return (
        sum(int(a) * int(c) for a, c in zip(n.tolist(), count.tolist(), strict=False)),
        sum(int(a) * int(c) for a, c in zip(e.tolist(), count.tolist(), strict=False)),
    )


def _sample_counts(count: np.ndarray, m: int) -> np.ndarray:
    """Counts scaled to ``m`` graphs in total (largest remainders, ties by bin), exact."""
    total = int(count.sum())
    if total <= m:
        return count
    x = count.astype(np.int64)
    if not fits_int64(int(x.max()) * m):
        x = x.astype(object)
    x = x * m  # count * m / total: floor and remainder over the common denominator
    f = (x // total).astype(np.int64)
    rem = x - f * total
    rest = m - int(f.sum())
    if rest > 0:
        f[np.argsort(-rem.astype(np.int64), kind="stable")[:rest]] += 1
    return f


def _iroot(x: int, k: int) -> int:
    """``floor(x ** (1 / k))`` of a non-negative integer, by integer Newton steps."""
    if x < 2:
        return x
    r = 1 << -(-x.bit_length() // k)  # >= the root
    while True:
        s = ((k - 1) * r + x // r ** (k - 1)) // k
        if s >= r:
            return r
        r = s


def _geometric_points(a: int, b: int, num: int) -> list[int]:
    """``np.rint(np.geomspace(a, b, num))`` exactly: the integer nearest to
    ``a ** (1 - t) * b ** t`` for ``t = i / (num - 1)`` (halves cannot occur)."""
    if num == 1:
        return [a]
    g = num - 1
    out = []
    for i in range(num):
        m = a ** (g - i) * b**i  # the point is m ** (1 / g)
        r = _iroot(m, g)
        out.append(r + 1 if 2**g * m > (2 * r + 1) ** g else r)
    return out


def _even_points(a: int, b: int, num: int) -> list[int]:
    """``np.rint(np.linspace(a, b, num))`` exactly (halves to even)."""
    if num == 1:
        return [a]
    return [round(a + Fraction((b - a) * i, num - 1)) for i in range(num)]


def _check_range(value: Any, name: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InputTypeError(
            f"{name} must be a pair (low, high) of integers, got {value!r}"
        ) from None
    if lo < 0 or hi < lo:
        raise InputError(f"{name} must satisfy 0 <= low <= high, got {value!r}")
    if hi > MAX_LIMIT:
        raise InputError(f"{name} high end {hi} exceeds the largest limit searched, {MAX_LIMIT}")
    return lo, hi


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
        self.heuristic, self.method, self.tol = heuristic, method, decimal(tolerance)
        self.num = int(hist.count.sum())
        self.tn, self.te = _totals(hist.n_node, hist.n_edge, hist.count)
        self.gcap = self.num if max_graphs is None else max_graphs - 1
        self.sample = _sample_counts(hist.count, sample_graphs)
        self.sampled = int(self.sample.sum()) < self.num
        self.sn, self.se = _totals(hist.n_node, hist.n_edge, self.sample)
        self.e_lo, self.e_hi = e_lo, e_hi
        self.est: dict[tuple[int, int], _Record] = {}
        self.exact: dict[tuple[int, int], _Record] = {}

    # -- bounds and points
    def packs_lb(self, mn: int, me: int) -> int:
        return batches_lower_bound(self.tn, self.te, self.num, mn - 1, me, self.gcap)

    def aligned(self, lo: int, hi: int, points: int) -> list[int]:
        """Node limits strictly between ``lo`` and ``hi`` at which ``k`` graphs of mean size
        fill a pack exactly (``ceil(nodes / ceil(graphs / k)) + 1``; the sweet spots of
        tables with few distinct sizes), at most ``points`` of them, evenly spread in ``k``."""
        if self.tn <= 0:
            return []
        # graphs of mean size (tn / num) in lo - 1 and hi - 1 nodes, in integers
        k_lo = max(1, (lo - 1) * self.num // self.tn)
        k_hi = (hi - 1) * self.num // self.tn + 1
        ks = (
            sorted(set(_even_points(k_lo, k_hi, min(points, k_hi - k_lo + 1))))
            if k_hi >= k_lo
            else []
        )
        out = set()
        for k in ks:
            p = -(-self.num // max(min(k, self.gcap), 1))
            mn = -(-self.tn // p) + 1
            if lo < mn < hi:
                out.add(int(mn))
        return sorted(out)

    def upper_bound(self, mn: int, me: int) -> Fraction:
        return _hm(_record(self.tn, self.te, self.packs_lb(mn, me), mn, me, None, False))

    def edge_limit(self, mn: int, slack: Fraction) -> int:
        """Edge limit matched to the node limit: edges exactly filled at the node (or graph)
        lower bound, times ``1 + slack`` (exact), inside the edge range."""
        p0 = max(-(-self.tn // (mn - 1)), -(-self.num // self.gcap), 1)
        me = math.ceil(self.te * (1 + Fraction(slack)) / p0) if self.te else 0
        return int(min(max(me, self.e_lo), self.e_hi))

    # -- evaluation
    def estimate(self, mn: int, me: int) -> _Record:
        key = (mn, me)
        if key in self.exact:
            return self.exact[key]
        if key not in self.est:
            if not self.sampled:
                return self.evaluate(mn, me)
            h = self.hist
            res = pack_bins(
                h.n_node,
                h.n_edge,
                self.sample,
                node_limit=mn - 1,
                edge_limit=me,
                graph_limit=self.gcap,
                heuristic=self.heuristic,
                method=self.method,
            )
            # packs over the bound scale with the table; the bound itself is exact
            over = Fraction((res.num_packs - res.lower_bound) * self.num, int(self.sample.sum()))
            packs = self.packs_lb(mn, me) + over
            self.est[key] = _record(self.tn, self.te, packs, mn, me, self.max_graphs, False)
        return self.est[key]

    def evaluate(self, mn: int, me: int) -> _Record:
        key = (mn, me)
        if key not in self.exact:
            rec = _exact_record(self.hist, mn, me, self.max_graphs, self.heuristic, self.method)
            self.exact[key] = rec
            self.est.pop(key, None)
        return self.exact[key]

    def points(self) -> list[_Record]:
        return list(self.est.values()) + list(self.exact.values())

    # -- the rule
    def chosen(self, records: list[_Record]) -> list[_Record]:
        """Records optimal under the rule (within ``tol`` of the best HM), smallest first."""
        if not records:
            return []
        top = max(_hm(r) for r in records)
        ok = [r for r in records if _hm(r) >= top - self.tol]
        return sorted(ok, key=_size_key)


def _size_key(r: _Record) -> tuple[int, int, Fraction]:
    return (r["max_nodes"], r["max_edges"], -_hm(r))


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
    max_graphs = _check_search(sizes, grid, exact_points, sample_graphs, tolerance, max_graphs)
    hist = sizes.histogram()
    n_lo, n_hi, e_lo, e_hi = _limit_bounds(hist, node_range, edge_range)
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
        for r in sorted(s.points(), key=lambda r: -_hm(r)):
            if r["max_nodes"] not in tops:
                tops.append(r["max_nodes"])
        for mn in sorted({r["max_nodes"] for r in s.chosen(s.points())})[:2] + tops[:2]:
            edges.refine(mn)
    # 3. exact packing of the best candidates; the optimum is chosen among exact records
    _pack_exactly(s, exact_points, edges if refine else None)
    return _records(s, tolerance)


def _check_search(
    sizes: GraphSizes,
    grid: int,
    exact_points: int,
    sample_graphs: int,
    tolerance: float,
    max_graphs: int | None,
) -> int | None:
    """`search_limits`'s arguments checked; returns ``max_graphs`` as an int or ``None``."""
    if not isinstance(sizes, GraphSizes):
        raise InputTypeError(f"sizes must be a GraphSizes, got {type(sizes).__name__}")
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise InputError(f"grid must be an integer >= 1 points per interval, got {grid!r}")
    if (
        isinstance(exact_points, bool)
        or not isinstance(exact_points, (int, np.integer))
        or exact_points < 1
    ):
        raise InputError(f"exact_points must be an integer >= 1, got {exact_points!r}")
    if (
        isinstance(sample_graphs, bool)
        or not isinstance(sample_graphs, (int, np.integer))
        or sample_graphs < 1
    ):
        raise InputError(f"sample_graphs must be an integer >= 1, got {sample_graphs!r}")
    if not (isinstance(tolerance, (int, float, np.floating)) and 0 <= tolerance < 1):
        raise InputError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    if max_graphs is not None:
        if (
            isinstance(max_graphs, bool)
            or not isinstance(max_graphs, (int, np.integer))
            or max_graphs < 2
        ):
            raise InputError(
                f"max_graphs must be an integer >= 2 (one graph is padding), got {max_graphs!r}"
            )
        max_graphs = int(max_graphs)
    if len(sizes) == 0:
        raise InputError("the size table holds no graphs; nothing to pack")
    return max_graphs


def _limit_bounds(
    hist: SizeHistogram,
    node_range: tuple[int, int] | None,
    edge_range: tuple[int, int] | None,
) -> tuple[int, int, int, int]:
    """``(n_lo, n_hi, e_lo, e_hi)``: the padded limits searched, from the smallest that holds
    the largest graph (or the user's range) up to the range's end or `MAX_LIMIT`."""
    need_n = max(int(hist.n_node.max()) + 1, 2)  # one padding node, at least one real node
    need_e = int(hist.n_edge.max())
    if need_n > MAX_LIMIT or need_e > MAX_LIMIT:
        raise InputError(
            f"the largest graph ({need_n - 1} nodes, {need_e} edges) exceeds the "
            f"largest limit searched, {MAX_LIMIT}"
        )
    user_n = _check_range(node_range, "node_range") if node_range is not None else None
    user_e = _check_range(edge_range, "edge_range") if edge_range is not None else None
    n_lo = max(need_n, user_n[0]) if user_n else need_n
    n_hi = user_n[1] if user_n else MAX_LIMIT
    e_lo = max(need_e, user_e[0]) if user_e else need_e
    e_hi = user_e[1] if user_e else MAX_LIMIT
    if n_hi < need_n or e_hi < need_e:
        raise InputError(
            f"limits up to {n_hi} nodes / {e_hi} edges cannot hold the largest graph "
            f"({need_n - 1} nodes + 1 padding node, {need_e} edges)"
        )
    return n_lo, n_hi, e_lo, e_hi


_ZERO, _ONE_PC = Fraction(0), Fraction(1, 100)


def _best_at(s: _Search, mn: int, slacks: Sequence[Fraction] = (_ZERO, _ONE_PC)) -> _Record:
    """The best estimate at node limit ``mn`` over the edge ``slacks``."""
    return max((s.estimate(mn, s.edge_limit(mn, d)) for d in slacks), key=_hm)


def _ladder(
    s: _Search, hist: SizeHistogram, n_lo: int, n_hi: int, max_graphs: int | None
) -> tuple[list[int], list[_Record]]:
    """``(ladder, records)``: node limits doubling from ``n_lo``, with their best estimates,
    until doubling stops paying past the extent (packs of at least 64 mean graphs, or twice
    the most a graph cap allows) or the range (capped at every graph in one pack) ends."""
    # a pack never needs more than every graph: cap the ladder there
    n_cap = min(n_hi, max(n_lo, s.tn + 1))
    max_n = int(hist.n_node.max())
    extent = 64 * max(-(-s.tn // s.num), 1) + 1
    if max_graphs is not None:
        extent = min(extent, 2 * (s.gcap * max_n + 1))
    extent = min(n_cap, max(extent, n_lo))
    ladder: list[int] = []
    recs: list[_Record] = []
    mn = n_lo
    while True:
        ladder.append(mn)
        recs.append(_best_at(s, mn))
        if mn >= n_cap:
            break
        if len(recs) >= 3 and mn >= extent:
            prev_best = max(_hm(r) for r in recs[:-2])
            gain = max(_hm(recs[-1]), _hm(recs[-2])) - prev_best
            if gain <= s.tol / 2:
                break
        mn = min(2 * mn, n_cap)
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
                else sorted(set(_geometric_points(a, b, grid + 2)))[1:-1]
            )
            | set(s.aligned(a, b, grid))
        )
        for a, b in spans
    ]
    ubs = [
        max((s.upper_bound(mn, s.edge_limit(mn, _ZERO)) for mn in c), default=_ZERO) for c in cands
    ]
    near = [j for j in (i - 1, i) if 0 <= j < len(spans)]
    others = sorted((j for j in range(len(spans)) if j not in near), key=lambda j: -ubs[j])
    for j in near + others[:1]:
        for mn in cands[j]:
            top = max(_hm(r) for r in s.points())
            if s.upper_bound(mn, s.edge_limit(mn, _ZERO)) < top - s.tol:
                continue  # cannot reach the optimal set
            _best_at(s, mn, (_ZERO, _ONE_PC))


class _EdgeRefiner:
    """Edge slack around the ratio at a node limit, each node limit once."""

    def __init__(self, s: _Search) -> None:
        self.s = s
        self.done: set[int] = set()

    def refine(self, mn: int) -> None:
        """Estimates at node limit ``mn`` over the edge slacks, widened while the best is on
        an edge of the slacks tried (so the optimum is interior in the edge limit)."""
        if mn in self.done:
            return
        self.done.add(mn)
        s = self.s
        slacks = list(_EDGE_SLACK)
        while True:
            rs = [s.estimate(mn, s.edge_limit(mn, d)) for d in slacks]
            j = max(range(len(rs)), key=lambda k: _hm(rs[k]))
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
    pool = sorted(s.points(), key=lambda r: -_hm(r))
    s.evaluate(pool[0]["max_nodes"], pool[0]["max_edges"])
    for _ in range(6):
        exact = list(s.exact.values())
        top = max(_hm(r) for r in exact)
        head = s.chosen(exact)[0]
        cands = sorted(
            (
                r
                for r in s.points()
                if not r["exact"] and _hm(r) >= top - s.tol and _size_key(r) < _size_key(head)
            ),
            key=_size_key,
        )
        if cands and len(s.exact) < 2 * exact_points:
            for r in cands[: max(1, exact_points - 1)]:
                s.evaluate(r["max_nodes"], r["max_edges"])
            continue
        if edges is not None and head["max_nodes"] not in edges.done:
            edges.refine(head["max_nodes"])  # then look again
            continue
        break


def _records(s: _Search, tolerance: float) -> LimitRecords:
    """The records, best first: exact ones within the tolerance (smallest first), the other
    exact ones, then the estimates (each by decreasing HM), and whether the optimum is
    interior to the limits tried."""
    exact = list(s.exact.values())
    ok = s.chosen(exact)
    ok_keys = {(r["max_nodes"], r["max_edges"]) for r in ok}
    rest_exact = sorted(
        (r for r in exact if (r["max_nodes"], r["max_edges"]) not in ok_keys),
        key=lambda r: (-_hm(r), *_size_key(r)),
    )
    estimates = sorted(s.est.values(), key=lambda r: (-_hm(r), *_size_key(r)))
    out = ok + rest_exact + estimates
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
