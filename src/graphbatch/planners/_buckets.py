"""The ``buckets`` strategy: K padded shapes chosen to minimise total padding (IPU paper 5.5).

Graphs that fit the budget are packed to it; larger graphs get larger shapes whose room is
filled with small graphs. Candidate packings (each large graph alone, or the packs filled
around the k' shapes best for that first packing, k' <= k) get the k shapes best for them
(the scaled family, `packing.choose_scales`) or tight shapes by an integer cost
(`packing.choose_tight_shapes`); the cheapest wins and each batch is padded to the cheapest
chosen shape that holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .._budget import Budget
from .._errors import InputError, InputTypeError
from .._plan import BatchPlan
from .._sizes import GraphSizes
from .._validate import as_positive_int
from ..packing import (
    MAX_SHAPES,
    choose_scales,
    choose_tight_shapes,
    graphs_for_scale,
    pack_bins,
    pack_histogram,
    pack_needs,
    pack_scales,
    shape_for_scale,
    shape_padding_bound,
)
from ..packing.kernels import assign_graphs, budget_lower_bound
from ._assemble import OversizeSplit, finish_plan
from ._memo import once_per_schedule
from ._pack_choice import bins_of
from ._packing import _COMMON, _budget, _empty_slots, _heuristic, _kept_sizes, _rngs
from ._registry import PlanRequest, register

__all__ = ["plan_buckets"]

#: Packs as slots: ``(slot_bin, offsets, packer name or None)``.
_Candidate = tuple[np.ndarray, np.ndarray, str | None]
#: Padded ``(nodes, edges, graphs)`` of the chosen shapes.
_Shapes = tuple[np.ndarray, np.ndarray, np.ndarray]
#: ``(cost, shape_cost)`` of tight shapes (`_tight_bucket_request`; cost ``None``: slots).
_TightRequest = tuple[tuple[int, ...] | None, int]


@register(
    "buckets",
    description="K padded shapes (num_shapes, 1-16) chosen to minimise total padding: graphs "
    "larger than the budget get larger shapes whose room is filled with small graphs, the rest "
    "is packed to the budget; each batch is padded to the smallest shape it fits; "
    "tight_shape=True or shape_cost=[c0, c_node, c_edge, c_graph, c_shape] (integers): tight "
    "shapes minimising that cost; oversize_shapes='own' (with on_oversize='own_batch'): graphs "
    "larger than the budget get batches of their own outside the K shapes",
    options=("num_shapes", "heuristic", "shape_cost", "oversize_shapes", *_COMMON),
)
def plan_buckets(req: PlanRequest) -> BatchPlan:
    k = _num_shapes(req)
    budget = _budget(req)
    heuristic = _heuristic(req)
    multiple = as_positive_int(req.option("multiple", 64), "multiple")
    packs = _bucket_packs(req, k, budget, heuristic, multiple)
    g, slot_bin, pack_off, packer, shapes, tight = packs[:6]
    extra_meta = dict(packs.extra_meta)
    shape_n, shape_e, shape_g = shapes
    # this epoch's graphs in the packs' slots
    graph_bin = np.concatenate([g.inverse, g.nbins + np.arange(g.alone.shape[0])])
    assign_rng, order_rng = _rngs(req)
    order, offsets = assign_graphs(
        slot_bin,
        pack_off,
        graph_bin,
        np.concatenate([g.kept, g.alone]),
        assign_rng=assign_rng,
        order_rng=order_rng,
    )
    tot_n, tot_e = _batch_sums(req.sizes, order, offsets)
    gpb = np.diff(offsets)
    # every batch padded to the smallest chosen shape it fits (tight: the cheapest)
    group = _smallest_holding(tot_n, tot_e, gpb, shapes)
    if tight is not None and gpb.shape[0]:
        group = _cheapest_holding(
            tot_n, tot_e, gpb, shape_n, shape_e, shape_g, multiple, tight[0], g.fam
        )
    sizes = req.sizes
    split = OversizeSplit(
        g.kept,
        g.own,
        _own_positions(g, order_rng),
        g.skipped,
        sizes.n_node[g.kept],
        sizes.n_edge[g.kept],
    )
    return finish_plan(
        req,
        order=order,
        offsets=offsets,
        pad_nodes=shape_n[group],
        pad_edges=shape_e[group],
        pad_graphs=shape_g[group],
        lower_bound=_buckets_lower_bound(sizes, g, shapes, gpb.shape[0]),
        split=split,
        **extra_meta,
        budget=budget,
        heuristic=heuristic,
        num_shapes=k,
        packer=packer,
        shapes=[
            [int(a), int(b), int(c)] for a, b, c in zip(shape_n, shape_e, shape_g, strict=False)
        ],
    )


class _BucketPacks(NamedTuple):
    """What ``buckets`` plans from the sizes and options alone (the same every epoch): the
    request's graphs, the chosen packs ``(slot_bin, pack_off, packer)``, their K shapes, the
    tight-shape request (or None) and the metadata of tight shapes."""

    graphs: _BucketGraphs
    slot_bin: np.ndarray
    pack_off: np.ndarray
    packer: str | None
    shapes: _Shapes
    tight: _TightRequest | None
    extra_meta: dict[str, Any]


def _bucket_packs(
    req: PlanRequest, k: int, budget: Budget, heuristic: str, multiple: int
) -> _BucketPacks:
    """The candidate packings and the k scaled shapes best for each, the cheapest chosen (with
    tight shapes: chosen by cost over every candidate). Epoch-independent: a schedule's
    `planning_memo` keeps them for its later epochs (arrays read-only)."""

    def make() -> _BucketPacks:
        g = _BucketGraphs.of(req, budget, heuristic, multiple, _own_oversize_shapes(req))
        candidates, (_, chosen, slot_bin, pack_off, packer) = _candidate_packings(g, k, multiple)
        shapes = _scaled_shapes(chosen, g.fam, multiple)
        tight = _tight_bucket_request(req, g.fam)
        extra_meta: dict[str, Any] = {}
        if tight is not None:  # tight shapes by an integer cost, over every candidate packing
            slot_bin, pack_off, packer, shapes, extra_meta = _tight_buckets(
                candidates, g.pack_totals, k, g.fam, multiple, *tight
            )
        return _BucketPacks(g, slot_bin, pack_off, packer, shapes, tight, extra_meta)

    return once_per_schedule(
        req,
        ("buckets", k, budget.as_tuple(), heuristic, multiple),
        make,
        lambda packs: (packs.slot_bin, packs.pack_off, *packs.shapes),
    )


def _own_oversize_shapes(req: PlanRequest) -> bool:
    """Option ``oversize_shapes``: ``"shared"`` (default: graphs larger than the budget take
    one of the K shapes, filled with small graphs) or ``"own"`` (each gets a batch of its own,
    shaped by `own_batch_shape`, outside the K shapes; needs ``on_oversize="own_batch"``)."""
    mode = req.option("oversize_shapes", "shared")
    if not isinstance(mode, str) or mode not in ("shared", "own"):
        raise InputError(f"oversize_shapes must be 'shared' or 'own', got {mode!r}")
    if mode == "own" and req.on_oversize != "own_batch":
        raise InputError(
            f"oversize_shapes='own' gives graphs larger than the budget batches of their own: "
            f"it needs on_oversize='own_batch', got {req.on_oversize!r}"
        )
    return mode == "own"


def _own_positions(g: _BucketGraphs, order_rng: np.random.Generator | None) -> np.ndarray:
    """Where each own-batch graph goes: after how many kept graphs of the plan's order. Drawn
    from the epoch's order generator when the plan is shuffled (after the kept graphs are
    assigned), else spread by graph index (after the kept graphs of lower index)."""
    n_own = g.own.shape[0]
    if not n_own:
        return np.zeros(0, np.int64)
    if order_rng is None:
        return np.searchsorted(g.kept, g.own).astype(np.int64)
    return np.sort(order_rng.integers(0, g.kept.shape[0] + 1, size=n_own)).astype(np.int64)


def _num_shapes(req: PlanRequest) -> int:
    k = req.option("num_shapes", 4)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputTypeError(f"num_shapes must be an integer, got {k!r}")
    if not 1 <= int(k) <= MAX_SHAPES:
        raise InputError(f"num_shapes must be in 1..{MAX_SHAPES}, got {k}")
    return int(k)


def _pack_sums(
    slot_bin: np.ndarray, offsets: np.ndarray, bin_nodes: np.ndarray, bin_edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pack node and edge totals of packs as slots (bins' sizes ``bin_nodes``/``bin_edges``)."""
    if offsets.shape[0] <= 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.add.reduceat(bin_nodes[slot_bin], offsets[:-1]), np.add.reduceat(
        bin_edges[slot_bin], offsets[:-1]
    )


@dataclass(frozen=True)
class _BucketGraphs:
    """The graphs of a ``buckets`` request: ``kept`` (fit the budget, as a histogram: bins
    ``hist_nodes``/``hist_edges``/``hist_count``, each kept graph's bin ``inverse``), ``alone``
    (larger: a bucket of their own, filled with small graphs; sizes ``a_n``/``a_e``), ``own``
    (larger, with ``oversize_shapes="own"``: a batch of their own outside the K shapes),
    ``skipped``; ``fam`` the shape family (the budget scaled) and ``lim`` the packing limits.
    Bin ``nbins + i`` of a slot is large graph ``i``."""

    kept: np.ndarray
    alone: np.ndarray
    skipped: np.ndarray
    hist_nodes: np.ndarray
    hist_edges: np.ndarray
    hist_count: np.ndarray
    inverse: np.ndarray
    a_n: np.ndarray
    a_e: np.ndarray
    fam: Budget
    lim: dict[str, Any]
    own: np.ndarray

    @classmethod
    def of(
        cls, req: PlanRequest, budget: Budget, heuristic: str, multiple: int, own_shapes: bool
    ) -> _BucketGraphs:
        sizes = req.sizes
        allidx = np.arange(len(sizes), dtype=np.int64)
        big = (sizes.n_node > budget.node_capacity) | (sizes.n_edge > budget.edge_capacity)
        skipped = own = np.zeros(0, np.int64)
        if req.on_oversize == "skip":
            skipped, alone = allidx[big], np.zeros(0, np.int64)
        elif own_shapes:  # a batch of its own each, outside the K shapes
            own, alone = allidx[big], np.zeros(0, np.int64)
        else:  # larger graphs get larger buckets: never an error, never an unbounded own shape
            alone = allidx[big]
        kept = allidx[~big]
        # the shape family: the budget scaled; an edge budget of 0 scales as `multiple` edges
        # when planned graphs have edges (issue 14: 0-edge shapes were written for batches
        # with edges)
        planned = np.concatenate([kept, alone])
        fam = budget
        if budget.n_edge == 0 and planned.size and sizes.n_edge[planned].max() > 0:
            fam = Budget(budget.n_node, multiple, budget.n_graph)
        lim = dict(
            node_limit=budget.node_capacity,
            edge_limit=budget.edge_capacity,
            graph_limit=budget.graph_capacity,
            heuristic=heuristic,
        )
        if kept.size:
            hist = _kept_sizes(req, kept).histogram(return_inverse=True)
            hist_nodes, hist_edges, hist_count = hist.n_node, hist.n_edge, hist.count
            inverse = bins_of(hist)
        else:
            hist_nodes = hist_edges = hist_count = inverse = np.zeros(0, np.int64)
        return cls(
            kept,
            alone,
            skipped,
            hist_nodes,
            hist_edges,
            hist_count,
            inverse,
            sizes.n_node[alone],
            sizes.n_edge[alone],
            fam,
            lim,
            own,
        )

    @property
    def nbins(self) -> int:
        return self.hist_nodes.shape[0]

    def pack_totals(
        self, slot_bin: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-pack node and edge totals, large graphs included."""
        return _pack_sums(
            slot_bin,
            offsets,
            np.concatenate([self.hist_nodes, self.a_n]),
            np.concatenate([self.hist_edges, self.a_e]),
        )

    def filled(self, shape_n: np.ndarray, shape_e: np.ndarray, shape_g: np.ndarray) -> _Candidate:
        """Each large graph gets the smallest of the shapes and its room is filled with small
        graphs; the remaining small graphs are packed to the budget. Returns the packs as
        slots and the packer of the remaining graphs."""
        hist_nodes, hist_edges, hist_count = self.hist_nodes, self.hist_edges, self.hist_count
        nbins = self.nbins
        a_n, a_e = self.a_n, self.a_e
        remaining = hist_count.copy()
        fill_bins: list[np.ndarray] = [np.zeros(0, np.int64)] * self.alone.shape[0]
        if self.alone.size and self.kept.size:
            grp = np.argmax(
                (shape_n[None, :] >= a_n[:, None] + 1) & (shape_e[None, :] >= a_e[:, None]), axis=1
            )
            room = (shape_n[grp] - 1 - a_n, shape_e[grp] - a_e, shape_g[grp] - 2)
            pats, base = pack_histogram(
                hist_nodes,
                hist_edges,
                hist_count,
                fit="best",
                initial=room,
                return_base=True,
                **self.lim,
            )
            for t in np.flatnonzero(base >= 0).tolist():
                pattern_slots = slice(pats.offsets[t], pats.offsets[t + 1])
                items = np.repeat(pats.bins[pattern_slots], pats.copies[pattern_slots])
                fill_bins[int(base[t])] = items
                remaining -= np.bincount(items, minlength=nbins)
        if remaining.sum():
            res = pack_bins(hist_nodes, hist_edges, remaining, fit="best", **self.lim)
            slot_bin, offsets, packer = res.slot_bin, res.offsets, res.method
        else:
            (slot_bin, offsets), packer = _empty_slots(), None
        parts = [slot_bin] + [np.concatenate([[nbins + i], fb]) for i, fb in enumerate(fill_bins)]
        lens = np.array([len(x) for x in parts[1:]], np.int64)
        return (
            np.concatenate(parts),
            np.concatenate([offsets, offsets[-1] + np.cumsum(lens)]),
            packer,
        )


def _candidate_packings(
    g: _BucketGraphs, k: int, multiple: int
) -> tuple[list[_Candidate], tuple[Fraction, np.ndarray, np.ndarray, np.ndarray, str | None]]:
    """``(candidates, best)``: every candidate packing ``(slot_bin, offsets, packer)`` and the
    cheapest one with its k scaled shapes, ``(cost, chosen scales, slot_bin, offsets,
    packer)``. The candidates: the first packing (small graphs to the budget, each large graph
    alone), and for every k' <= k the packs filled around the k' shapes best for the first
    packing; each candidate's packs get the k shapes best for them, so k shapes never cost
    more than k - 1 (exact costs: a later candidate wins only when strictly cheaper)."""
    fam = g.fam

    def shaped(slot_bin: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, Fraction]:
        pack_nodes, pack_edges = g.pack_totals(slot_bin, offsets)
        return choose_scales(
            pack_scales(pack_nodes, pack_edges, fam, multiple, np.diff(offsets)), k, fam, multiple
        )

    n_alone = g.alone.shape[0]
    if g.kept.size:
        first = pack_bins(g.hist_nodes, g.hist_edges, g.hist_count, fit="best", **g.lim)
        first_slot_bin, first_offsets, first_method = first.slot_bin, first.offsets, first.method
        fn, fe = _pack_sums(first_slot_bin, first_offsets, g.hist_nodes, g.hist_edges)
    else:
        (first_slot_bin, first_offsets), first_method = _empty_slots(), None
        fn = fe = np.zeros(0, np.int64)
    cand_sb = np.concatenate([first_slot_bin, g.nbins + np.arange(n_alone, dtype=np.int64)])
    cand_off = np.concatenate([first_offsets, first_offsets[-1] + 1 + np.arange(n_alone)])
    chosen, cost = shaped(cand_sb, cand_off)
    best = (cost, chosen, cand_sb, cand_off, first_method)
    candidates: list[_Candidate] = [(cand_sb, cand_off, first_method)]
    first_scales = pack_scales(
        np.concatenate([fn, g.a_n]), np.concatenate([fe, g.a_e]), fam, multiple
    )
    tried_shapes: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for kk in range(1, k + 1) if n_alone and g.kept.size else ():
        sc_k, _ = choose_scales(first_scales, kk, fam, multiple)
        sn_k, se_k = (np.atleast_1d(x) for x in shape_for_scale(sc_k, fam, multiple))
        key = (tuple(sn_k.tolist()), tuple(se_k.tolist()))
        if key in tried_shapes:
            continue
        tried_shapes.add(key)
        sb_k, off_k, packer_k = g.filled(sn_k, se_k, np.atleast_1d(graphs_for_scale(sc_k, fam)))
        candidates.append((sb_k, off_k, packer_k))
        chosen_k, cost_k = shaped(sb_k, off_k)
        if cost_k < best[0]:
            best = (cost_k, chosen_k, sb_k, off_k, packer_k)
    return candidates, best


def _scaled_shapes(chosen: np.ndarray, fam: Budget, multiple: int) -> _Shapes:
    """``(nodes, edges, graphs)`` arrays of the chosen scales of the family."""
    shape_n, shape_e = (np.atleast_1d(x) for x in shape_for_scale(chosen, fam, multiple))
    return shape_n, shape_e, np.atleast_1d(graphs_for_scale(chosen, fam))


def _batch_sums(
    sizes: GraphSizes, order: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Real node and edge totals of each batch."""
    if offsets.shape[0] <= 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (
        np.add.reduceat(sizes.n_node[order], offsets[:-1]),
        np.add.reduceat(sizes.n_edge[order], offsets[:-1]),
    )


def _smallest_holding(
    tot_n: np.ndarray, tot_e: np.ndarray, gpb: np.ndarray, shapes: _Shapes
) -> np.ndarray:
    """Per batch, the first shape (in the family's order) that holds it."""
    shape_n, shape_e, shape_g = shapes
    if not gpb.shape[0]:
        return np.zeros(0, np.int64)
    fits = (
        (shape_n[None, :] >= tot_n[:, None] + 1)
        & (shape_e[None, :] >= tot_e[:, None])
        & (shape_g[None, :] >= gpb[:, None] + 1)
    )
    return np.argmax(fits, axis=1)


def _buckets_lower_bound(sizes: GraphSizes, g: _BucketGraphs, shapes: _Shapes, nb: int) -> int:
    """The batch bound for packs of at most the largest chosen shape, every planned graph
    counted (it never exceeds the batch count; issue 14: the bound of the budget-sized graphs
    did)."""
    if not nb:
        return 0
    shape_n, shape_e, shape_g = shapes
    planned = np.concatenate([g.kept, g.alone])
    return budget_lower_bound(
        int(sizes.n_node[planned].sum()),
        int(sizes.n_edge[planned].sum()),
        planned.shape[0],
        Budget(
            int(shape_n.max(initial=1)),
            int(shape_e.max(initial=0)),
            int(max(shape_g.max(initial=2), 2)),
        ),
    )


def _tight_bucket_request(req: PlanRequest, fam: Budget) -> _TightRequest | None:
    """``(cost, shape_cost)`` when ``buckets`` should choose tight shapes by cost (option
    ``shape_cost=[c0, c_node, c_edge, c_graph, c_shape]``, or ``tight_shape=True``: padded slots
    relative to the budget), else ``None`` (the scaled family)."""
    shape_cost = req.option("shape_cost", None)
    if shape_cost is None:
        return (None, 0) if req.option("tight_shape", None) is True else None
    if (
        isinstance(shape_cost, (str, bytes))
        or not hasattr(shape_cost, "__len__")
        or len(shape_cost) != 5
    ):
        raise InputTypeError(
            "shape_cost must be [c0, c_node, c_edge, c_graph, c_shape] "
            f"(5 integers >= 0), got {shape_cost!r}"
        )
    for v in shape_cost:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 0:
            raise InputTypeError(f"shape_cost entries must be integers >= 0, got {shape_cost!r}")
    vals = [int(v) for v in shape_cost]
    return (tuple(vals[:4]), vals[4])


def _tight_buckets(
    candidates: list[_Candidate],
    totals: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    k: int,
    fam: Budget,
    multiple: int,
    cost: Sequence[int] | None,
    shape_cost: int,
) -> tuple[np.ndarray, np.ndarray, str | None, _Shapes, dict[str, Any]]:
    """The candidate packing and tight shapes of least integer cost
    (`packing._bucket_shapes.choose_tight_shapes`), with the bound of `shape_padding_bound` on
    the chosen packs. Returns ``(slot_bin, offsets, packer, (shape_n, shape_e, shape_g), meta)``."""
    best: tuple[int, np.ndarray, np.ndarray, str | None, np.ndarray, np.ndarray, Any, Any] | None
    best = None
    for slot_bin, offsets, packer in candidates:
        pack_nodes, pack_edges = totals(slot_bin, offsets)
        needs = pack_needs(pack_nodes, pack_edges, np.diff(offsets), multiple)
        shapes, _, total = choose_tight_shapes(
            needs, k, base=(fam.n_node, fam.n_edge), cost=cost, shape_cost=shape_cost
        )
        if best is None or total < best[0]:
            best = (total, slot_bin, offsets, packer, shapes, needs, pack_nodes, pack_edges)
    assert best is not None  # (the first packing is always a candidate)
    total, slot_bin, offsets, packer, shapes, needs, pack_nodes, pack_edges = best
    node_bound, edge_bound = shape_padding_bound(needs, k)
    meta = {
        "shape_choice": "tight",
        "shape_cost_total": int(total),
        "shape_bound": {
            "node_efficiency_max": float(int(pack_nodes.sum()) / node_bound) if node_bound else 1.0,
            "edge_efficiency_max": float(int(pack_edges.sum()) / edge_bound) if edge_bound else 1.0,
        },
    }
    return slot_bin, offsets, packer, (shapes[:, 0], shapes[:, 1], shapes[:, 2]), meta


def _cheapest_holding(
    tot_n: np.ndarray,
    tot_e: np.ndarray,
    gpb: np.ndarray,
    shape_n: np.ndarray,
    shape_e: np.ndarray,
    shape_g: np.ndarray,
    multiple: int,
    cost: Sequence[int] | None,
    fam: Budget,
) -> np.ndarray:
    """Per batch, the index of the least costly shape that holds it (integer costs; ties: the
    first). Every batch is held by some shape: its pack's."""
    c0, c_node, c_edge, c_graph = (
        (0, max(fam.n_edge, 1), max(fam.n_node, 1), 0) if cost is None else cost
    )
    per_shape = [
        c0 + c_node * int(a) + c_edge * int(b) + c_graph * int(g)
        for a, b, g in zip(shape_n.tolist(), shape_e.tolist(), shape_g.tolist(), strict=False)
    ]
    order = sorted(range(len(per_shape)), key=lambda i: (per_shape[i], i))
    group = np.full(tot_n.shape[0], -1, np.int64)
    for i in order:  # cheapest first: a batch takes the first shape that holds it
        free = group < 0
        fits = free & (shape_n[i] >= tot_n + 1) & (shape_e[i] >= tot_e) & (shape_g[i] >= gpb + 1)
        group[fits] = i
    if (group < 0).any():  # pragma: no cover - each batch's own pack shape holds it
        raise RuntimeError("a batch fits no tight bucket shape")
    return group
