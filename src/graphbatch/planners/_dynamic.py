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
from ._assemble import finish_plan, split_oversize, tight_shape_wanted
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
    if tight_shape_wanted(req) and kept.size:
        # the tight shape from a seed-only pass (the same every epoch): the largest batch of a
        # greedy fill over a seed-drawn order; each epoch then fills up to that shape
        seed_order = np.sort(kept)[np.random.default_rng(
            np.random.SeedSequence(req.seed, spawn_key=(5,))).permutation(kept.shape[0])]
        _, sn, se = greedy_fill(req.sizes.n_node[seed_order], req.sizes.n_edge[seed_order],
                                budget)
        shape = Budget(int(sn.max()) + 1, int(se.max()), budget.n_graph)
        meta["padded_shape"] = list(shape.as_tuple())
    offsets, real_nodes, real_edges = greedy_fill(nodes, edges, shape)
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

