"""Dynamic batching: greedy fill under a node/edge/graph budget, padded to that budget
(Jraph/TF-GNN; static-vs-dynamic paper, Algorithms 1-3)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._budget import Budget
from ..packing.kernels import (
    PackedSizes,
    SizePairs,
    any_oversize,
    budget_lower_bound,
    greedy_fill,
    index_dtype,
    step_fill,
    take_into,
    widen_into,
)
from ._assemble import finish_plan, split_oversize, tight_shape_wanted
from ._registry import PlanRequest, register

__all__ = ["plan_dynamic"]


def _permutation(rng: np.random.Generator, n: int) -> np.ndarray:
    """``rng.permutation(n)`` as int32 below 2**31 graphs: the same draws (a shuffle of
    ``arange(n)``, whatever its dtype), half the memory."""
    out = np.arange(n, dtype=index_dtype(n))
    rng.shuffle(out)
    return out


def _epoch_order(req: PlanRequest) -> np.ndarray:
    """`PlanRequest.order` (this epoch's graph order) as int32 below 2**31 graphs."""
    n = len(req.sizes)
    return _permutation(req.epoch_rng(), n) if req.shuffle else np.arange(n, dtype=index_dtype(n))


@register(
    "dynamic",
    description="Jraph/TF-GNN dynamic batching: greedy fill under a node/edge/graph budget "
    "(estimated from batch_size by Algorithm 1 unless given), every batch padded to the budget",
    options=("sample_size", "multiple", "tight_shape"),
    fixed_shape=True,
)
def plan_dynamic(req: PlanRequest):
    # memory-lean: int16/int32 sizes where they fit, per-graph arrays dropped once used
    # (a 100M-graph epoch plans in a few GB; benchmarks/plan_scale.py)
    budget = req.resolve_budget()
    sizes = req.sizes
    any_big = any_oversize(sizes.n_node, sizes.n_edge, budget)
    # with no oversize graph the epoch order is drawn after the seed pass (independent streams)
    # one int32 per graph read in random orders instead of two int64 columns
    packed = PackedSizes(sizes.n_node, sizes.n_edge)
    order = _epoch_order(req) if any_big else None
    split = split_oversize(req, order, budget, narrow=True, packed=packed) if any_big else None
    shape, meta = budget, {}
    ranks = req.world_size
    pairs = None
    n_kept = len(sizes) if split is None else split.kept.shape[0]
    # memory already faulted in is reused (filling fresh pages costs ~1 ns a byte here): with
    # no oversize graph the int64 items of the seed-pass shuffle take the epoch's items, and
    # then the plan's int64 order; the packed sizes (int32) take the step fill's order
    reuse = split is None and req.shuffle and packed.packed is not None and n_kept < 2**31
    items = np.empty(n_kept, np.int64) if reuse else None
    if tight_shape_wanted(req) and n_kept:
        # the tight shape from a seed-only pass (the same every epoch): the largest batch of the
        # fill over a seed-drawn order; each epoch then fills up to that shape
        seed_rng = np.random.default_rng(np.random.SeedSequence(req.seed, spawn_key=(5,)))
        # the kept graphs in dataset order, drawn by the same permutation
        kept_sorted = None if split is None else np.sort(split.kept)
        if packed.packed is not None and n_kept < 2**31:  # sizes carried through the shuffle
            sn_all, se_all = packed.shuffled(seed_rng, kept_sorted, out=items)[1:]
        else:
            seed_order = _permutation(seed_rng, n_kept)
            if kept_sorted is not None:
                seed_order = kept_sorted[seed_order]
            sn_all, se_all = packed.gather(seed_order)
            del seed_order
        del kept_sorted
        if ranks > 1:
            # the graphs' distinct (n, e) pairs: the same in the epoch order (one scan)
            pairs = SizePairs(sn_all, se_all)
            off, sn, se = step_fill(sn_all, se_all, budget, ranks, return_totals=True,
                                    with_order=False, pairs=pairs)[1:]
            steps = (off.shape[0] - 1) // ranks
            # 0.3% room for the epoch's own imbalance within a step (never above the budget),
            # rounded up in integers
            sn = np.minimum((sn * 1003 + 999) // 1000, budget.node_capacity)
            se = np.minimum((se * 1003 + 999) // 1000, budget.edge_capacity)
        else:
            sn, se = greedy_fill(sn_all, se_all, budget)[1:]
        del sn_all, se_all
        shape = Budget(int(sn.max()) + 1, int(se.max()), budget.n_graph)
        meta["padded_shape"] = list(shape.as_tuple())
    if reuse:
        # the epoch order and its sizes from one shuffle (no gather in random order)
        order, e_nodes, e_edges = packed.shuffled(req.epoch_rng(), with_order=True, out=items)
        split = split_oversize(req, order, budget, gathered=(e_nodes, e_edges))
        del e_nodes, e_edges
    elif split is None:
        split = split_oversize(req, _epoch_order(req), budget, narrow=True, packed=packed)
    perm_buf = packed.packed if reuse and ranks > 1 else None  # int32, one per graph
    del packed
    order = None
    kept, nodes, edges = split.kept, split.kept_nodes, split.kept_edges
    # finish_plan needs none of them (the kept order may be a view of the shuffled items)
    split = replace(split, kept=None, kept_nodes=None, kept_edges=None)
    totals = (int(nodes.sum(dtype=np.int64)), int(edges.sum(dtype=np.int64)))
    lb = budget_lower_bound(*totals, kept.shape[0], budget)
    greedy = None
    if ranks > 1:
        # data-parallel: steps of `ranks` evenly filled batches, a multiple of `ranks` in all;
        # kept when it needs no more batches than the greedy fill split to a multiple of
        # ranks, i.e. when the greedy fill needs more than (step batches - ranks): the greedy
        # fill stops as soon as that is known
        perm, off, bn, be = step_fill(
            nodes, edges, shape, ranks, return_totals=True, perm_out=perm_buf, totals=totals,
            **(dict(fill=1.0, steps=steps, pairs=pairs) if "padded_shape" in meta else {}))
        pairs = None
        del perm_buf
        if (np.diff(off) > 0).all():
            greedy = greedy_fill(nodes, edges, shape, stop_at=off.shape[0] - 1 - ranks + 1,
                                 totals=totals)
            if greedy is None:  # the step fill is kept
                kept = take_into(kept, perm)  # kept[perm], written over perm
                offsets, real_nodes, real_edges = off, bn, be
                meta["step_fill"] = True
        else:
            greedy = greedy_fill(nodes, edges, shape)
        del perm
    else:
        greedy = greedy_fill(nodes, edges, shape)
    del nodes, edges
    if greedy is not None:
        offsets, real_nodes, real_edges = greedy
    del greedy
    if items is not None:  # the plan's int64 order, written over the shuffled items
        kept = widen_into(kept, items)
    else:
        # a strided view of the shuffled int64 items (`PackedSizes.shuffled`) holds 8 bytes
        # a graph: kept as its own int32 array, the items are freed before the plan is built
        kept = np.ascontiguousarray(kept)
    items = None
    nb = offsets.shape[0] - 1
    return finish_plan(
        req,
        order=kept,
        real_nodes=real_nodes,
        real_edges=real_edges,
        offsets=offsets,
        pad_nodes=np.full(nb, shape.n_node, dtype=np.int64),
        pad_edges=np.full(nb, shape.n_edge, dtype=np.int64),
        pad_graphs=np.full(nb, shape.n_graph, dtype=np.int64),
        lower_bound=lb,
        split=split,
        budget=budget,
        **meta,
    )
