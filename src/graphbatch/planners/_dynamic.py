"""Dynamic batching: greedy fill under a node/edge/graph budget, padded to that budget
(Jraph/TF-GNN; static-vs-dynamic paper, Algorithms 1-3)."""

from __future__ import annotations

import numpy as np

from .._budget import Budget
from ._assemble import ceil_div, finish_plan, split_oversize, tight_shape_wanted
from ._registry import PlanRequest, register

__all__ = ["plan_dynamic", "greedy_fill", "greedy_offsets", "greedy_offsets_reference"]


def greedy_offsets(nodes: np.ndarray, edges: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch boundaries of the sequential greedy fill (Algorithm 3) over graphs in this order.

    A batch takes graphs in order while real nodes <= ``budget.node_capacity``, edges <=
    ``edge_capacity`` and graphs <= ``graph_capacity``; every graph must fit alone.
    """
    return greedy_fill(nodes, edges, budget)[0]


def greedy_fill(nodes: np.ndarray, edges: np.ndarray, budget: Budget):
    """`greedy_offsets` plus the real node and edge totals of each batch.

    Vectorised: for every start position the end of a greedy batch is the graph-cap window
    where that window fits, else found with ``searchsorted`` on prefix sums; the chain of batch
    starts is then followed (one step per batch).
    """
    m = nodes.shape[0]
    if m == 0:
        z = np.zeros(0, dtype=np.int64)
        return np.zeros(1, dtype=np.int64), z, z
    cap_v, cap_e = budget.node_capacity, budget.edge_capacity
    cn = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(nodes, out=cn[1:])
    ce = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(edges, out=ce[1:])
    end = np.minimum(np.arange(budget.graph_capacity, m + budget.graph_capacity), m)
    over = (cn[end] - cn[:-1] > cap_v) | (ce[end] - ce[:-1] > cap_e)
    if over.any():
        pos = np.flatnonzero(over)
        e = np.searchsorted(cn, cn[pos] + cap_v, side="right") - 1
        np.minimum(e, np.searchsorted(ce, ce[pos] + cap_e, side="right") - 1, out=e)
        end[pos] = np.minimum(e, end[pos])
        if (end[pos] <= pos).any():  # a graph that does not fit alone: caller's bug
            i = int(pos[np.flatnonzero(end[pos] <= pos)[0]])
            raise ValueError(f"graph at position {i} does not fit the budget {budget} alone")
    starts = []
    append = starts.append
    item = end.item
    s = 0
    while s < m:
        append(s)
        s = item(s)
    starts.append(m)
    offsets = np.asarray(starts, dtype=np.int64)
    return offsets, np.diff(cn[offsets]), np.diff(ce[offsets])


def greedy_offsets_reference(nodes, edges, budget: Budget) -> np.ndarray:
    """Plain per-graph loop of Algorithm 3, kept as the reference for tests and benchmarks."""
    cap_v, cap_e, cap_g = budget.node_capacity, budget.edge_capacity, budget.graph_capacity
    offsets = [0]
    cv = ce = cg = 0
    for i, (v, e) in enumerate(zip(nodes.tolist(), edges.tolist())):
        if v > cap_v or e > cap_e:
            raise ValueError(f"graph at position {i} exceeds the budget {budget}")
        if cv + v > cap_v or ce + e > cap_e or cg + 1 > cap_g:
            offsets.append(i)
            cv, ce, cg = v, e, 1
        else:
            cv, ce, cg = cv + v, ce + e, cg + 1
    if cg:
        offsets.append(len(nodes))
    return np.asarray(offsets, dtype=np.int64)


def budget_lower_bound(nodes_total: int, edges_total: int, graphs: int, budget: Budget) -> int:
    """Fewest batches any plan under ``budget`` needs: max of the three capacity ceilings."""
    return max(
        ceil_div(nodes_total, budget.node_capacity),
        ceil_div(edges_total, budget.edge_capacity),
        ceil_div(graphs, budget.graph_capacity),
    )


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

