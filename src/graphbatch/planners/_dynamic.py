"""Dynamic batching: greedy fill under a node/edge/graph budget, padded to that budget
(Jraph/TF-GNN; static-vs-dynamic paper, Algorithms 1-3)."""

from __future__ import annotations

import numpy as np

from .._budget import Budget
from ._assemble import ceil_div, finish_plan, split_oversize
from ._registry import PlanRequest, register

__all__ = ["plan_dynamic", "greedy_offsets", "greedy_offsets_reference"]


def greedy_offsets(nodes: np.ndarray, edges: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch boundaries of the sequential greedy fill (Algorithm 3) over graphs in this order.

    A batch takes graphs in order while real nodes <= ``budget.node_capacity``, edges <=
    ``edge_capacity`` and graphs <= ``graph_capacity``; every graph must fit alone. Vectorised:
    the end of a batch starting at each position is found for all positions at once with
    ``searchsorted`` on prefix sums, then the chain of batch starts is followed.
    """
    m = nodes.shape[0]
    if m == 0:
        return np.zeros(1, dtype=np.int64)
    cn = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(nodes, out=cn[1:])
    ce = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(edges, out=ce[1:])
    end = np.searchsorted(cn, cn[:-1] + budget.node_capacity, side="right") - 1
    np.minimum(end, np.searchsorted(ce, ce[:-1] + budget.edge_capacity, side="right") - 1, out=end)
    np.minimum(end, np.arange(budget.graph_capacity, m + budget.graph_capacity), out=end)
    if (end <= np.arange(m)).any():  # a graph that does not fit alone: caller's bug
        i = int(np.flatnonzero(end <= np.arange(m))[0])
        raise ValueError(f"graph at position {i} does not fit the budget {budget} alone")
    nxt = end.tolist()
    starts = []
    s = 0
    append = starts.append
    while s < m:
        append(s)
        s = nxt[s]
    starts.append(m)
    return np.asarray(starts, dtype=np.int64)


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
    options=("sample_size", "multiple"),
    fixed_shape=True,
)
def plan_dynamic(req: PlanRequest):
    budget = req.resolve_budget()
    split = split_oversize(req, req.order(), budget)
    kept = split.kept
    nodes = req.sizes.n_node[kept]
    edges = req.sizes.n_edge[kept]
    offsets = greedy_offsets(nodes, edges, budget)
    nb = offsets.shape[0] - 1
    lb = budget_lower_bound(int(nodes.sum()), int(edges.sum()), kept.shape[0], budget)
    return finish_plan(
        req,
        order=kept,
        offsets=offsets,
        pad_nodes=np.full(nb, budget.n_node, dtype=np.int64),
        pad_edges=np.full(nb, budget.n_edge, dtype=np.int64),
        pad_graphs=np.full(nb, budget.n_graph, dtype=np.int64),
        lower_bound=lb,
        split=split,
        budget=budget,
    )
