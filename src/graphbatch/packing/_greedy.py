"""Sequential greedy fill under a node/edge/graph budget (the `dynamic` rule, Algorithm 3 of the
static-vs-dynamic paper), and the lower bound on the number of batches any plan needs."""

from __future__ import annotations

from typing import overload

import numpy as np
from numpy.typing import NDArray

from .._budget import Budget
from .._errors import InputError
from . import _memory
from ._memory import index_dtype

__all__ = [
    "index_dtype",
    "greedy_fill",
    "greedy_offsets",
    "batches_lower_bound",
    "budget_lower_bound",
]


def batches_lower_bound(
    nodes_total: int,
    edges_total: int,
    graphs: int,
    node_capacity: int,
    edge_capacity: int,
    graph_capacity: int,
) -> int:
    """Fewest batches any plan needs: the max of ``ceil(total / capacity)`` over real nodes,
    edges and graphs (at least one batch when there are graphs). A capacity of 0 holds a total
    of 0; a positive total for it raises ``ValueError``. Python integers: no overflow."""
    out = 1 if int(graphs) else 0
    for total, cap, what in (
        (nodes_total, node_capacity, "nodes"),
        (edges_total, edge_capacity, "edges"),
        (graphs, graph_capacity, "graphs"),
    ):
        total, cap = int(total), int(cap)
        if cap <= 0:
            if total > 0:
                raise InputError(f"{total} real {what} cannot fit batches of capacity {cap}")
            continue
        out = max(out, -(-total // cap))
    return out


def budget_lower_bound(nodes_total: int, edges_total: int, graphs: int, budget: Budget) -> int:
    """Fewest batches any plan under ``budget`` needs (`batches_lower_bound` of its
    capacities)."""
    return batches_lower_bound(
        nodes_total,
        edges_total,
        graphs,
        budget.node_capacity,
        budget.edge_capacity,
        budget.graph_capacity,
    )


def greedy_offsets(nodes: np.ndarray, edges: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch boundaries of the sequential greedy fill (Algorithm 3) over graphs in this order.

    A batch takes graphs in order while real nodes <= ``budget.node_capacity``, edges <=
    ``edge_capacity`` and graphs <= ``graph_capacity``; every graph must fit alone.
    """
    return greedy_fill(nodes, edges, budget)[0]


#: `greedy_fill`'s result: batch offsets and the real node and edge totals of each batch.
Fill = tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]


@overload
def greedy_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    *,
    stop_at: None = ...,
    totals: tuple[int, int] | None = ...,
) -> Fill: ...


@overload
def greedy_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    *,
    stop_at: int | None,
    totals: tuple[int, int] | None = ...,
) -> Fill | None: ...


def greedy_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    *,
    stop_at: int | None = None,
    totals: tuple[int, int] | None = None,
) -> Fill | None:
    """`greedy_offsets` plus the real node and edge totals of each batch (all int64).

    ``stop_at``: return ``None`` as soon as the fill is known to need at least ``stop_at``
    batches (the batches so far plus `batches_lower_bound` of the graphs after them), without
    filling the rest; ``totals``: the int node and edge sums of all graphs, when known (for
    that bound).

    Vectorised per window of graphs: for every start position the end of a greedy batch is the
    graph-cap window where that window fits, else found with ``searchsorted`` on the window's
    prefix sums; the chain of batch starts is then followed (one step per batch). ``nodes`` and
    ``edges`` may be any integer dtype; memory beyond the result is O(window).
    """
    num_graphs = nodes.shape[0]
    if stop_at is not None and stop_at <= 0:
        return None
    if num_graphs == 0:
        z = np.zeros(0, dtype=np.int64)
        return np.zeros(1, dtype=np.int64), z, z
    node_cap, edge_cap = budget.node_capacity, budget.edge_capacity
    graph_cap = budget.graph_capacity
    starts_all: list[np.ndarray] = []
    batch_nodes: list[np.ndarray] = []
    batch_edges: list[np.ndarray] = []
    a = 0
    if stop_at is not None:
        if totals is None:
            totals = (int(nodes.sum(dtype=np.int64)), int(edges.sum(dtype=np.int64)))
        left_n, left_e = totals  # sums of the graphs from a on
        count = 0
    while a < num_graphs:
        # prefix sums over a..stop cover every batch starting in a..a+length-1 (<= graph_cap graphs)
        length = min(_memory.GREEDY_WINDOW, num_graphs - a)
        stop = min(num_graphs, a + length + graph_cap)
        node_prefix = np.zeros(stop - a + 1, dtype=np.int64)
        np.cumsum(nodes[a:stop], out=node_prefix[1:], dtype=np.int64)
        edge_prefix = np.zeros(stop - a + 1, dtype=np.int64)
        np.cumsum(edges[a:stop], out=edge_prefix[1:], dtype=np.int64)
        end = _batch_ends(node_prefix, edge_prefix, length, budget, a)
        starts: list[int] = []
        append = starts.append
        item = end.item
        s = 0
        while s < length:
            append(s)
            s = item(s)
        batch_starts = np.asarray(starts, dtype=np.int64)
        batch_ends = end[batch_starts]
        starts_all.append(batch_starts + a)
        batch_nodes.append(node_prefix[batch_ends] - node_prefix[batch_starts])
        batch_edges.append(edge_prefix[batch_ends] - edge_prefix[batch_starts])
        a += s  # the next batch starts here
        if stop_at is not None:
            count += batch_starts.shape[0]
            left_n -= int(node_prefix[s])
            left_e -= int(edge_prefix[s])
            if (
                count
                + batches_lower_bound(left_n, left_e, num_graphs - a, node_cap, edge_cap, graph_cap)
                >= stop_at
            ):
                return None
    offsets = np.concatenate([*starts_all, np.array([num_graphs], np.int64)])  # (a list of arrays)
    return offsets, np.concatenate(batch_nodes), np.concatenate(batch_edges)


def _batch_ends(
    node_prefix: np.ndarray, edge_prefix: np.ndarray, length: int, budget: Budget, start: int
) -> np.ndarray:
    """The end (window position, exclusive) of the greedy batch starting at each of the first
    ``length`` positions of a window of graphs from ``start`` (``node_prefix``/``edge_prefix``:
    its int64 prefix sums): the graph-cap end, or where the node or edge cap binds first, the
    last position within it (searched only there, each cap on its own). `InputError` when a
    graph does not fit the budget alone (the first one of the window)."""
    node_cap, edge_cap = budget.node_capacity, budget.edge_capacity
    graph_cap = budget.graph_capacity
    span = node_prefix.shape[0] - 1
    end = np.arange(graph_cap, length + graph_cap, dtype=np.int64)
    inside = max(0, min(length, span - graph_cap + 1))  # positions whose graph-cap end <= span
    np.minimum(end[inside:], span, out=end[inside:])
    over_n = _over(node_prefix, end, length, inside, graph_cap, node_cap)
    over_e = _over(edge_prefix, end, length, inside, graph_cap, edge_cap)
    if over_n.shape[0]:  # the node end is below the graph-cap end there
        end[over_n] = np.searchsorted(node_prefix, node_prefix[over_n] + node_cap, side="right") - 1
    if over_e.shape[0]:
        e = np.searchsorted(edge_prefix, edge_prefix[over_e] + edge_cap, side="right") - 1
        np.minimum(e, end[over_e], out=e)
        end[over_e] = e
    # a graph that does not fit alone (caller's bug): the first one of the window
    first = [
        int(p[b[0]])
        for p in (over_n, over_e)
        if p.shape[0]
        for b in (np.flatnonzero(end[p] <= p),)
        if b.shape[0]
    ]
    if first:
        raise InputError(
            f"graph at position {start + min(first)} does not fit the budget {budget} alone"
        )
    return end


def _over(
    prefix: np.ndarray, end: np.ndarray, length: int, inside: int, graph_cap: int, cap: int
) -> np.ndarray:
    """Positions ``p < length`` whose graphs ``p .. end[p]-1`` sum above ``cap`` (``prefix``:
    window prefix sums; ``end[p] = p + graph_cap`` for ``p < inside``: read as a slice there)."""
    upto = prefix[graph_cap : graph_cap + length] if inside == length else prefix[end]
    return np.flatnonzero(upto - prefix[:length] > cap)
