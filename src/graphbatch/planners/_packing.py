"""Tuple packing strategies: ``pack-lpf``, ``pack-spf``, ``pack-lpf-1d`` and ``pack-nnls``
(tuple-packing paper; IPU paper 4.1); ``buckets`` is in `_buckets`.

Packing works on the (nodes, edges) histogram and yields packs of size bins; each epoch the
concrete graphs of every bin are dealt to its slots in an order drawn from ``(seed, epoch)``,
and the order of packs and of graphs within each pack is shuffled (``fixed_packs=True`` keeps
the graph-to-pack assignment for the whole run and only shuffles orders).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._budget import Budget, round_up
from .._errors import InputTypeError, UnknownNameError
from .._plan import BatchPlan
from .._sizes import GraphSizes, SizeHistogram
from .._validate import as_positive_int
from ..packing import METHODS, PackPatterns, pack_bins, pack_histogram, pack_nnls
from ..packing.kernels import (
    any_oversize,
    assign_graphs,
    budget_lower_bound,
    gather_counts,
    heuristic_function,
    index_dtype,
    pack_totals,
)
from ._assemble import OversizeSplit, finish_plan, split_oversize, tight_shape_wanted
from ._memo import once_per_schedule
from ._pack_choice import PackTotals, bins_of, choose_packs, slots_area
from ._registry import OVERSIZE_POLICIES, PlanRequest, register

__all__ = ["plan_pack_lpf", "plan_pack_spf", "plan_pack_lpf_1d", "plan_pack_nnls"]

_COMMON = ("max_graphs_per_pack", "fixed_packs", "sample_size", "multiple", "tight_shape")


def _budget(req: PlanRequest) -> Budget:
    budget = req.resolve_budget()
    max_graphs = req.option("max_graphs_per_pack", None)
    if max_graphs is not None:
        max_graphs = as_positive_int(max_graphs, "max_graphs_per_pack")
        budget = Budget(budget.n_node, budget.n_edge, min(budget.n_graph, max_graphs + 1))
    return budget


def _rngs(req: PlanRequest) -> tuple[np.random.Generator | None, np.random.Generator | None]:
    """(assignment rng, order rng) for this epoch; ``None`` where nothing is shuffled."""
    if not req.shuffle:
        return None, None
    fixed = req.option("fixed_packs", False)
    if not isinstance(fixed, bool):
        raise InputTypeError(f"fixed_packs must be True or False, got {fixed!r}")
    if fixed:
        assign = np.random.default_rng(np.random.SeedSequence(req.seed, spawn_key=(2,)))
        return assign, req.epoch_rng()
    rng = req.epoch_rng()
    return rng, rng


def _kept(req: PlanRequest, budget: Budget) -> tuple[OversizeSplit, np.ndarray]:
    n = len(req.sizes)
    split = split_oversize(req, np.arange(n, dtype=index_dtype(n)), budget, narrow=True)
    split = replace(split, kept_nodes=None, kept_edges=None)  # not needed: free them
    return split, split.kept_graphs()  # increasing: split_oversize keeps the given (sorted) order


def _every_graph_fits(req: PlanRequest, budget: Budget) -> bool:
    """Whether the table has graphs and each fits ``budget`` alone (a valid oversize policy
    then keeps them all: `_kept` would return every graph), tested on the size columns chunk
    by chunk (no index array, no gathered sizes)."""
    sizes = req.sizes
    return (
        len(sizes) > 0
        and req.on_oversize in OVERSIZE_POLICIES
        and not any_oversize(sizes.n_node, sizes.n_edge, budget)
    )


def _kept_column(req: PlanRequest, kept: np.ndarray | None, name: str) -> np.ndarray:
    """Column ``name`` of the size table for the graphs ``kept`` (the column itself, no copy,
    when every graph is kept; else a narrow gather)."""
    col = getattr(req.sizes, name)
    return col if kept is None or kept.shape[0] == col.shape[0] else gather_counts(col, kept)


def _narrow_inverse(hist: SizeHistogram) -> SizeHistogram:
    """The histogram with its per-graph bin index as int16/int32 where the bins allow."""
    inv = bins_of(hist)
    dt = np.int16 if len(hist) < 2**15 else (np.int32 if len(hist) < 2**31 else np.int64)
    return replace(hist, inverse=inv.astype(dt))


def _kept_sizes(req: PlanRequest, kept: np.ndarray | None) -> GraphSizes:
    sizes = req.sizes
    return sizes if kept is None or kept.shape[0] == len(sizes) else sizes.subset(kept)


def _finish(
    req: PlanRequest,
    budget: Budget,
    split: OversizeSplit | None,
    kept: np.ndarray | None,
    hist_inverse: np.ndarray,
    slot_bin: np.ndarray,
    pack_offsets: np.ndarray,
    *,
    lower_bound: int | None = None,
    bin_nodes: np.ndarray | None = None,
    bin_edges: np.ndarray | None = None,
    shape: Budget | None = None,
    totals: PackTotals | None = None,
    **meta: Any,
) -> BatchPlan:
    """Assign graphs for this epoch and build the plan; every pack padded to ``shape``
    (default ``budget``; packs depend on the sizes only, so a tight shape holds every epoch).
    ``bin_nodes``/``bin_edges`` (sizes of the bins) give the real totals per pack without
    gathering per graph; ``totals``: the packs' `_pack_totals` when already known."""
    if shape is None:
        shape = budget
    else:
        meta["padded_shape"] = list(shape.as_tuple())
    assign_rng, order_rng = _rngs(req)
    n_kept = len(req.sizes) if kept is None else kept.shape[0]  # kept None: every graph
    ids = None if n_kept == len(req.sizes) else kept  # None: every graph, in order
    order, offsets, pack_order = assign_graphs(
        slot_bin,
        pack_offsets,
        hist_inverse,
        ids,
        assign_rng=assign_rng,
        order_rng=order_rng,
        return_pack_order=True,
    )
    num_packs = offsets.shape[0] - 1
    real: dict[str, np.ndarray] = {}
    if bin_nodes is not None and bin_edges is not None and num_packs:
        if totals is None:
            totals = pack_totals(slot_bin, pack_offsets, bin_nodes, bin_edges)
        real = dict(real_nodes=totals[0][pack_order], real_edges=totals[1][pack_order])
    pad_nodes = np.full(num_packs, shape.n_node, np.int64)
    pad_edges = np.full(num_packs, shape.n_edge, np.int64)
    pad_graphs = np.full(num_packs, shape.n_graph, np.int64)
    if lower_bound is None:
        lower_bound = budget_lower_bound(
            int(_kept_column(req, kept, "n_node").sum(dtype=np.int64)),
            int(_kept_column(req, kept, "n_edge").sum(dtype=np.int64)),
            n_kept,
            budget,
        )
    return finish_plan(
        req,
        order=order,
        offsets=offsets,
        pad_nodes=pad_nodes,
        pad_edges=pad_edges,
        pad_graphs=pad_graphs,
        lower_bound=lower_bound,
        split=split,
        budget=budget,
        **real,
        **meta,
    )


def _heuristic(req: PlanRequest, default: str = "product") -> str:
    h = req.option("heuristic", default)
    heuristic_function(h)
    return h


def _empty_slots() -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(slot_bin, offsets)`` of no packs."""
    return np.zeros(0, np.int64), np.zeros(1, np.int64)


def _finish_empty(
    req: PlanRequest,
    budget: Budget,
    split: OversizeSplit | None,
    kept: np.ndarray | None,
    **meta: Any,
) -> BatchPlan:
    """`_finish` of a request that keeps no graph: no bins, no slots, no packs."""
    slot_bin, pack_offsets = _empty_slots()
    return _finish(req, budget, split, kept, np.zeros(0, np.int64), slot_bin, pack_offsets, **meta)


def _finish_patterns(
    req: PlanRequest,
    budget: Budget,
    split: OversizeSplit | None,
    kept: np.ndarray | None,
    hist: SizeHistogram,
    pats: PackPatterns,
    **meta: Any,
) -> BatchPlan:
    """`_finish` of packs given as patterns over the kept graphs' histogram ``hist``, padded to
    their tight shape when the request asks for one."""
    slot_bin, pack_offsets = pats.slots()
    shape = (
        slots_area(slot_bin, pack_offsets, hist.n_node, hist.n_edge, budget)[0]
        if tight_shape_wanted(req)
        else None
    )
    return _finish(
        req,
        budget,
        split,
        kept,
        bins_of(hist),
        slot_bin,
        pack_offsets,
        bin_nodes=hist.n_node,
        bin_edges=hist.n_edge,
        shape=shape,
        **meta,
    )


def _plan_tuple(req: PlanRequest, fit: str) -> BatchPlan:
    budget = _budget(req)
    heuristic = _heuristic(req)
    method = req.option("method", "auto")
    if method not in METHODS:
        raise UnknownNameError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    split: OversizeSplit | None
    kept: np.ndarray | None
    if _every_graph_fits(req, budget):  # every graph kept: no index array (4 bytes a graph)
        split, kept = None, None
    else:
        split, kept = _kept(req, budget)
        if kept.size == 0:
            return _finish_empty(req, budget, split, kept, heuristic=heuristic, method=method)
        if kept.shape[0] == len(req.sizes):
            split, kept = None, None
    packs = _tuple_packs(req, kept, budget, heuristic, fit, method)
    hist = packs.hist
    return _finish(
        req,
        budget,
        split,
        kept,
        bins_of(hist),
        packs.slot_bin,
        packs.pack_offsets,
        bin_nodes=hist.n_node,
        bin_edges=hist.n_edge,
        shape=packs.shape,
        totals=packs.totals,
        heuristic=heuristic,
        packer=packs.packer,
        packs_tried=dict(packs.tried),
    )


class _TuplePacks(NamedTuple):
    """The packs of a tuple packing over the kept graphs' histogram (epoch-independent)."""

    hist: SizeHistogram
    slot_bin: np.ndarray
    pack_offsets: np.ndarray
    packer: str
    shape: Budget | None
    totals: PackTotals | None
    tried: dict[str, int]


def _tuple_packs(
    req: PlanRequest,
    kept: np.ndarray | None,
    budget: Budget,
    heuristic: str,
    fit: str,
    method: str,
) -> _TuplePacks:
    """The packs of ``pack-lpf``/``pack-spf``: the histogram packed (`pack_bins`) and the packs
    chosen (`choose_packs`). They depend on the sizes, the budget and the options only, so a
    schedule's `planning_memo` keeps them for its later epochs."""
    tight = tight_shape_wanted(req)

    def make() -> _TuplePacks:
        hist = _narrow_inverse(_kept_sizes(req, kept).histogram(return_inverse=True))
        res = pack_bins(
            hist.n_node,
            hist.n_edge,
            hist.count,
            node_limit=budget.node_capacity,
            edge_limit=budget.edge_capacity,
            graph_limit=budget.graph_capacity,
            heuristic=heuristic,
            fit=fit,
            method=method,
        )
        chosen = choose_packs(req, kept, hist, res, budget, tight)
        return _TuplePacks(hist, *chosen, res.tried)

    return once_per_schedule(
        req,
        ("tuple-packs", fit, heuristic, method, budget.as_tuple(), tight),
        make,
        lambda packs: (packs.slot_bin, packs.pack_offsets, *(packs.totals or ())),
    )


@register(
    "pack-lpf",
    description="tuple longest-pack-first (best-fit) histogram packing on (nodes, edges) with a "
    "monotone heuristic, plus balanced dealing when packs hold many graphs; every pack padded "
    "to the budget",
    options=("heuristic", "method", *_COMMON),
    fixed_shape=True,
)
def plan_pack_lpf(req: PlanRequest) -> BatchPlan:
    return _plan_tuple(req, "best")


@register(
    "pack-spf",
    description="tuple shortest-pack-first (first fit from the emptiest pack) histogram packing, "
    "plus balanced dealing when packs hold many graphs; every pack padded to the budget",
    options=("heuristic", "method", *_COMMON),
    fixed_shape=True,
)
def plan_pack_spf(req: PlanRequest) -> BatchPlan:
    return _plan_tuple(req, "first")


@register(
    "pack-lpf-1d",
    description="node-only longest-pack-first histogram packing (SchNet on IPUs); edges are a "
    "limit unless edge_limit=False, then the padded edge count covers the worst pack",
    options=("edge_limit", *_COMMON),
    fixed_shape=True,
)
def plan_pack_lpf_1d(req: PlanRequest) -> BatchPlan:
    budget = _budget(req)
    edge_limit = req.option("edge_limit", True)
    if not isinstance(edge_limit, bool):
        raise InputTypeError(f"edge_limit must be True or False, got {edge_limit!r}")
    sizes = req.sizes
    if edge_limit:
        split, kept = _kept(req, budget)
        if kept.size == 0:
            return _finish_empty(req, budget, split, kept)
        hist = _kept_sizes(req, kept).histogram(return_inverse=True)
        pats = pack_histogram(
            hist.n_node,
            hist.n_edge,
            hist.count,
            node_limit=budget.node_capacity,
            edge_limit=budget.edge_capacity,
            graph_limit=budget.graph_capacity,
            heuristic="node",
            fit="best",
        )
        return _finish_patterns(req, budget, split, kept, hist, pats, edge_limit=True)
    # edges unconstrained: pack node counts only; the padded edge count is the largest edge total
    # any pack can reach with the graphs of its node counts (fixed across epochs)
    wide = Budget(budget.n_node, np.iinfo(np.int32).max, budget.n_graph)
    split, kept = _kept(req, wide)
    if kept.size == 0:
        return _finish_empty(req, budget, split, kept)
    nodes = sizes.n_node[kept]
    uniq, inverse, count = np.unique(nodes, return_inverse=True, return_counts=True)
    max_e = np.zeros(uniq.shape[0], np.int64)
    np.maximum.at(max_e, inverse.reshape(-1), sizes.n_edge[kept])
    pats = pack_histogram(
        uniq,
        np.zeros_like(uniq),
        count,
        node_limit=budget.node_capacity,
        edge_limit=0,
        graph_limit=budget.graph_capacity,
        heuristic="node",
    )
    worst = np.zeros(pats.num_patterns, np.int64)  # integer sums: exact
    np.add.at(
        worst,
        np.repeat(np.arange(pats.num_patterns), np.diff(pats.offsets)),
        pats.copies * max_e[pats.bins],
    )
    multiple = as_positive_int(req.option("multiple", 64), "multiple")
    n_edge = round_up(int(worst.max()) if worst.size else 0, multiple)
    shape = Budget(budget.n_node, n_edge, budget.n_graph)
    slot_bin, pack_offsets = pats.slots()
    lower_bound = budget_lower_bound(int(nodes.sum()), 0, kept.shape[0], shape)
    return _finish(
        req,
        shape,
        split,
        kept,
        inverse.reshape(-1),
        slot_bin,
        pack_offsets,
        lower_bound=lower_bound,
        edge_limit=False,
    )


@register(
    "pack-nnls",
    description="non-negative least-squares packing (Lawson-Hanson NNLS over candidate pack "
    "patterns, solved exactly) as a baseline; every pack padded to the budget",
    options=("heuristic", *_COMMON),
    fixed_shape=True,
)
def plan_pack_nnls(req: PlanRequest) -> BatchPlan:
    budget = _budget(req)
    heuristic = _heuristic(req)
    split, kept = _kept(req, budget)
    if kept.size == 0:
        return _finish_empty(req, budget, split, kept)
    hist = _kept_sizes(req, kept).histogram(return_inverse=True)
    pats = pack_nnls(
        hist.n_node,
        hist.n_edge,
        hist.count,
        node_limit=budget.node_capacity,
        edge_limit=budget.edge_capacity,
        graph_limit=budget.graph_capacity,
        heuristic=heuristic,
    )
    return _finish_patterns(req, budget, split, kept, hist, pats, heuristic=heuristic)
