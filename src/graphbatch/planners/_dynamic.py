"""Dynamic batching: greedy fill under a node/edge/graph budget, padded to that budget
(Jraph/TF-GNN; static-vs-dynamic paper, Algorithms 1-3)."""

from __future__ import annotations

import numpy as np

from .._budget import Budget
from ..packing._greedy import (  # noqa: F401  (re-exported: the kernels live in packing/)
    batches_lower_bound,
    greedy_fill,
    greedy_offsets,
    greedy_offsets_reference,
)
from ..packing._steps import step_fill
from ._assemble import batch_totals, finish_plan, split_oversize, tight_shape_wanted
from ._registry import PlanRequest, register

__all__ = ["plan_dynamic", "budget_lower_bound", "greedy_fill", "greedy_offsets",
           "greedy_offsets_reference"]


def budget_lower_bound(nodes_total: int, edges_total: int, graphs: int, budget: Budget) -> int:
    """Fewest batches any plan under ``budget`` needs (`packing.batches_lower_bound`)."""
    return batches_lower_bound(nodes_total, edges_total, graphs, budget.node_capacity,
                               budget.edge_capacity, budget.graph_capacity)


@register(
    "dynamic",
    description="Jraph/TF-GNN dynamic batching: greedy fill under a node/edge/graph budget "
    "(estimated from batch_size by Algorithm 1 unless given), every batch padded to the budget",
    options=("sample_size", "multiple", "tight_shape"),
    fixed_shape=True,
)
def plan_dynamic(req: PlanRequest):
    budget = req.resolve_budget()
    split = split_oversize(req, req.order(), budget)
    kept, nodes, edges = split.kept, split.kept_nodes, split.kept_edges
    shape, meta = budget, {}
    ranks = req.world_size
    if tight_shape_wanted(req) and kept.size:
        # the tight shape from a seed-only pass (the same every epoch): the largest batch of the
        # fill over a seed-drawn order; each epoch then fills up to that shape
        seed_order = np.sort(kept)[np.random.default_rng(
            np.random.SeedSequence(req.seed, spawn_key=(5,))).permutation(kept.shape[0])]
        sn_all, se_all = req.sizes.n_node[seed_order], req.sizes.n_edge[seed_order]
        if ranks > 1:
            perm, off = step_fill(sn_all, se_all, budget, ranks)
            steps = (off.shape[0] - 1) // ranks
            sn, se = batch_totals(sn_all[perm], off), batch_totals(se_all[perm], off)
            # 0.3% room for the epoch's own imbalance within a step (never above the budget)
            sn = np.minimum(np.ceil(sn * 1.003).astype(np.int64), budget.node_capacity)
            se = np.minimum(np.ceil(se * 1.003).astype(np.int64), budget.edge_capacity)
        else:
            _, sn, se = greedy_fill(sn_all, se_all, budget)
        shape = Budget(int(sn.max()) + 1, int(se.max()), budget.n_graph)
        meta["padded_shape"] = list(shape.as_tuple())
    offsets, real_nodes, real_edges = greedy_fill(nodes, edges, shape)
    if ranks > 1:
        # data-parallel: steps of `ranks` evenly filled batches, a multiple of `ranks` in all;
        # kept when it needs no more batches than the greedy fill split to a multiple of ranks
        perm, off = step_fill(nodes, edges, shape, ranks,
                              **(dict(fill=1.0, steps=steps) if "padded_shape" in meta else {}))
        greedy_nb = -(-(offsets.shape[0] - 1) // ranks) * ranks
        if off.shape[0] - 1 <= greedy_nb and (np.diff(off) > 0).all():
            kept, nodes, edges, offsets = kept[perm], nodes[perm], edges[perm], off
            real_nodes, real_edges = batch_totals(nodes, offsets), batch_totals(edges, offsets)
            meta["step_fill"] = True
    nb = offsets.shape[0] - 1
    lb = budget_lower_bound(int(nodes.sum()), int(edges.sum()), kept.shape[0], budget)
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

