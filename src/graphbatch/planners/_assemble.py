"""Shared planner plumbing: oversize-graph policy and turning batch boundaries into a plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._budget import Budget, next_pow2, round_up
from .._errors import InputError, InputTypeError
from .._plan import BatchPlan
from ..packing.kernels import PackedSizes, any_oversize, batch_totals, gather_counts
from ._registry import OVERSIZE_POLICIES, PlanRequest

__all__ = [
    "PAD_MODES",
    "OversizeSplit",
    "ceil_div",
    "finish_fixed_count_plan",
    "finish_plan",
    "padded_shapes",
    "split_oversize",
    "tight_shape_wanted",
]

#: Padding rules for strategies with a fixed number of graphs per batch.
PAD_MODES = ("static-64", "pow2", "max")


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, with ``b == 0`` allowed only when ``a == 0``."""
    if b <= 0:
        if a == 0:
            return 0
        raise InputError(f"cannot fit {a} items in batches of capacity {b}")
    return -(-int(a) // int(b))


@dataclass(frozen=True)
class OversizeSplit:
    """Result of applying the oversize policy to an ordered list of graph indices.

    ``kept``: graphs that fit, in order. ``own``: graphs that get a batch of their own, with
    ``own_after[i]`` = number of kept graphs preceding ``own[i]`` in the original order (so the
    batch can be placed where the graph came up). ``skipped``: graphs left out on request.
    ``kept_nodes``/``kept_edges``: the sizes of the kept graphs. `split_oversize` sets every
    field; a planner that hands the split on to `finish_plan` may release ``kept`` and its
    sizes (``None``), which `finish_plan` does not read.
    """

    kept: np.ndarray | None
    own: np.ndarray
    own_after: np.ndarray
    skipped: np.ndarray
    kept_nodes: np.ndarray | None
    kept_edges: np.ndarray | None

    def kept_graphs(self) -> np.ndarray:
        """``kept``, which must not have been released."""
        if self.kept is None:
            raise RuntimeError("the kept graphs of this oversize split were released")
        return self.kept

    def kept_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(kept_nodes, kept_edges)``, which must not have been released."""
        if self.kept_nodes is None or self.kept_edges is None:
            raise RuntimeError("the kept sizes of this oversize split were released")
        return self.kept_nodes, self.kept_edges


def split_oversize(
    req: PlanRequest,
    order: np.ndarray,
    budget: Budget,
    *,
    narrow: bool = False,
    packed: PackedSizes | None = None,
    gathered: tuple[np.ndarray, np.ndarray] | None = None,
) -> OversizeSplit:
    """Apply ``req.on_oversize`` to graphs that do not fit ``budget`` alone.

    ``"error"`` raises ``ValueError`` naming the first such graph, its size and the budget.
    ``narrow=True`` gives ``kept_nodes``/``kept_edges`` as int32 where they fit
    (`gather_counts`), for the memory-lean planners; ``packed`` (the table's `PackedSizes`)
    gathers them with one read per graph; ``gathered`` passes them already in ``order``
    (`PackedSizes.shuffled`).
    """
    if req.on_oversize not in OVERSIZE_POLICIES:
        raise InputError(
            f"on_oversize must be one of {', '.join(OVERSIZE_POLICIES)}, got {req.on_oversize!r}"
        )
    sizes = req.sizes
    if gathered is not None:
        nodes, edges = gathered
    elif narrow and packed is not None:
        nodes, edges = packed.gather(order)
    else:
        take = gather_counts if narrow else (lambda col, idx: col[idx])
        nodes = take(sizes.n_node, order)
        edges = take(sizes.n_edge, order)
    empty = np.zeros(0, dtype=np.int64)
    if not any_oversize(nodes, edges, budget):
        return OversizeSplit(order, empty, empty, empty, nodes, edges)
    big = (nodes > budget.node_capacity) | (edges > budget.edge_capacity)
    if req.on_oversize == "error":
        pos = np.flatnonzero(big)
        i = int(order[pos[0]])
        raise InputError(
            f"graph {i} ({sizes.n_node[i]} nodes, {sizes.n_edge[i]} edges) does not fit the budget "
            f"{budget} (room for {budget.node_capacity} real nodes and {budget.edge_capacity} "
            f"real edges); {pos.shape[0]} graph(s) are oversize. Raise the budget, or pass "
            "on_oversize='skip' or 'own_batch'"
        )
    fit = ~big
    kept, kept_nodes, kept_edges = order[fit], nodes[fit], edges[fit]
    if req.on_oversize == "skip":
        return OversizeSplit(kept, empty, empty, np.sort(order[big]), kept_nodes, kept_edges)
    pos = np.flatnonzero(big)
    own_after = pos - np.arange(pos.shape[0])  # kept graphs before each oversize graph
    return OversizeSplit(
        kept, order[big], own_after.astype(np.int64), empty, kept_nodes, kept_edges
    )


def tight_shape_wanted(req: PlanRequest) -> bool:
    """Option ``tight_shape`` of the fixed-shape budget strategies: pad to the smallest shape
    that holds every batch (of every epoch) instead of the budget. Default: ``True`` when the
    budget is estimated from ``batch_size``, ``False`` for a user-given budget (kept as given)."""
    v = req.option("tight_shape", None)
    if v is None:
        return req.budget is None
    if not isinstance(v, bool):
        raise InputTypeError(f"tight_shape must be True or False, got {v!r}")
    return v


def padded_shapes(
    real_nodes: np.ndarray, real_edges: np.ndarray, mode: str, multiple: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Padded (nodes, edges) per batch, one node reserved for the padding graph.

    ``static-64``: totals rounded up to ``multiple``; ``pow2``: to the next power of two;
    ``max``: every batch gets the epoch's largest totals (one shape for the epoch).
    """
    if mode == "static-64":
        return round_up(real_nodes + 1, multiple), round_up(real_edges, multiple)
    if mode == "pow2":
        return next_pow2(real_nodes + 1), next_pow2(real_edges)
    if mode == "max":
        nb = real_nodes.shape[0]
        top_n = int(real_nodes.max()) + 1 if nb else 1
        top_e = int(real_edges.max()) if nb else 0
        return np.full(nb, top_n, dtype=np.int64), np.full(nb, top_e, dtype=np.int64)
    raise InputError(f"pad must be one of {', '.join(PAD_MODES)}, got {mode!r}")


def own_batch_shape(n_node: int, n_edge: int, budget: Budget, multiple: int = 64) -> Budget:
    """Enlarged shape for one oversize graph: the budget grown (in ``multiple`` steps) to fit it."""
    return Budget(
        max(budget.n_node, round_up(n_node + 1, multiple)),
        max(budget.n_edge, round_up(n_edge, multiple)),
        budget.n_graph,
    )


def finish_fixed_count_plan(
    req: PlanRequest,
    *,
    order: np.ndarray,
    offsets: np.ndarray,
    batch_size: int,
    pad_fn: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    lower_bound: int,
    **meta: Any,
) -> BatchPlan:
    """`finish_plan` for strategies with ``batch_size`` graph slots in every batch: the real
    per-batch totals of ``order``/``offsets`` and their padded shapes ``pad_fn(real_nodes,
    real_edges) -> (pad_nodes, pad_edges)``."""
    real_nodes = batch_totals(gather_counts(req.sizes.n_node, order), offsets)
    real_edges = batch_totals(gather_counts(req.sizes.n_edge, order), offsets)
    pad_nodes, pad_edges = pad_fn(real_nodes, real_edges)
    return finish_plan(
        req,
        order=order,
        offsets=offsets,
        pad_nodes=pad_nodes,
        pad_edges=pad_edges,
        pad_graphs=np.full(offsets.shape[0] - 1, batch_size, dtype=np.int64),
        lower_bound=lower_bound,
        real_nodes=real_nodes,
        real_edges=real_edges,
        **meta,
    )


def finish_plan(
    req: PlanRequest,
    *,
    order: np.ndarray,
    offsets: np.ndarray,
    pad_nodes: np.ndarray,
    pad_edges: np.ndarray,
    pad_graphs: np.ndarray,
    lower_bound: int,
    real_nodes: np.ndarray | None = None,
    real_edges: np.ndarray | None = None,
    split: OversizeSplit | None = None,
    budget: Budget | None = None,
    **meta: Any,
) -> BatchPlan:
    """Build the `BatchPlan`: insert own-batch graphs where they came up, add totals and meta.

    ``order``/``offsets``/``pad_*`` describe the batches of the kept graphs. ``lower_bound`` is
    the bound for those batches; each own batch adds one to it. ``real_nodes``/``real_edges``
    may pass the per-batch real totals when the planner already has them.
    """
    order = np.asarray(order, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    pad_nodes = np.asarray(pad_nodes, dtype=np.int64)
    pad_edges = np.asarray(pad_edges, dtype=np.int64)
    pad_graphs = np.asarray(pad_graphs, dtype=np.int64)
    skipped = np.zeros(0, dtype=np.int64)
    n_own = 0
    if split is not None:
        skipped = split.skipped
        if split.own.shape[0]:
            if budget is None:
                raise InputError("own_batch graphs need the budget to enlarge")
            n_own = int(split.own.shape[0])
            order, offsets, pad_nodes, pad_edges, pad_graphs = _insert_own_batches(
                req, order, offsets, pad_nodes, pad_edges, pad_graphs, split, budget
            )
    sizes = req.sizes
    if n_own or real_nodes is None or real_edges is None:
        real_nodes = batch_totals(sizes.n_node[order], offsets)
        real_edges = batch_totals(sizes.n_edge[order], offsets)
    real_cost = None if sizes.n_bytes is None else batch_totals(sizes.n_bytes[order], offsets)
    info = {
        "strategy": req.strategy,
        "seed": req.seed,
        "epoch": req.epoch,
        "shuffle": req.shuffle,
        "batch_size": req.batch_size,
        "on_oversize": req.on_oversize,
        "budget": None if budget is None else list(budget.as_tuple()),
        "options": {k: v for k, v in req.options.items()},
        "lower_bound": int(lower_bound) + n_own,
        "own_batches": n_own,
        "world_size": 1,
    }
    info.update(meta)
    return BatchPlan(
        order,
        offsets,
        pad_nodes,
        pad_edges,
        pad_graphs,
        skipped,
        real_nodes=real_nodes,
        real_edges=real_edges,
        real_cost=real_cost,
        meta=info,
    )


def _insert_own_batches(
    req: PlanRequest,
    order: np.ndarray,
    offsets: np.ndarray,
    pad_nodes: np.ndarray,
    pad_edges: np.ndarray,
    pad_graphs: np.ndarray,
    split: OversizeSplit,
    budget: Budget,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    sizes = req.sizes
    multiple = int(req.option("multiple", 64))
    starts = offsets[:-1]
    # batch index before which each own batch goes: first batch starting at/after the graph
    at = np.searchsorted(starts, split.own_after, side="left")
    shapes = [
        own_batch_shape(int(sizes.n_node[g]), int(sizes.n_edge[g]), budget, multiple)
        for g in split.own
    ]
    # graphs: own graph goes at position offsets[at] in the order
    graph_pos = offsets[at] if offsets.shape[0] > 1 else np.zeros_like(at)
    new_order = np.insert(order, graph_pos, split.own)
    sizes_b = np.diff(offsets)
    new_sizes = np.insert(sizes_b, at, 1)
    new_offsets = np.concatenate([[0], np.cumsum(new_sizes)]).astype(np.int64)
    new_pn = np.insert(pad_nodes, at, [s.n_node for s in shapes])
    new_pe = np.insert(pad_edges, at, [s.n_edge for s in shapes])
    new_pg = np.insert(pad_graphs, at, [s.n_graph for s in shapes])
    return new_order, new_offsets, new_pn, new_pe, new_pg
