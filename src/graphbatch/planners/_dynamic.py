"""Dynamic batching: greedy fill under a node/edge/graph budget, padded to that budget
(Jraph/TF-GNN; static-vs-dynamic paper, Algorithms 1-3)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, TypedDict

import numpy as np

from .._budget import Budget
from .._plan import BatchPlan
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
from ._assemble import OversizeSplit, finish_plan, split_oversize, tight_shape_wanted
from ._memo import once_per_schedule
from ._registry import PlanRequest, register

__all__ = ["plan_dynamic"]


@register(
    "dynamic",
    description="Jraph/TF-GNN dynamic batching: greedy fill under a node/edge/graph budget "
    "(estimated from batch_size by Algorithm 1 unless given), every batch padded to the budget",
    options=("sample_size", "multiple", "tight_shape"),
    fixed_shape=True,
)
def plan_dynamic(req: PlanRequest) -> BatchPlan:
    """Graphs in this epoch's order fill batches greedily while the budget holds (Algorithm 3);
    every batch is padded to the budget, or with ``tight_shape`` to the largest batch of a
    seed-only pass (the same shape every epoch). With ``world_size`` ranks the batches are
    filled a step of ``ranks`` even batches at a time where that needs no more batches."""
    budget = req.resolve_budget()
    graphs = _Graphs(req, budget)  # oversize policy applied; per-graph buffers reused
    shape = budget
    seed_steps: _SeedSteps | None = None
    meta: dict[str, Any] = {}
    if tight_shape_wanted(req) and graphs.n_kept:
        shape, seed_steps = _memo_seed_shape(req, graphs, budget)
        meta["padded_shape"] = list(shape.as_tuple())
    epoch = graphs.epoch()  # the kept graphs in this epoch's order, with their sizes
    lower_bound = budget_lower_bound(*epoch.totals, epoch.count, budget)
    if req.world_size > 1:
        fill = _step_or_greedy_fill(epoch, shape, req.world_size, seed_steps, graphs.order_buffer())
    else:
        fill = _greedy_fill(epoch, shape)
    fill = graphs.with_plan_order(fill)  # int64, over the items' buffer where reused
    nb = fill.offsets.shape[0] - 1
    if fill.step_fill:
        meta["step_fill"] = True
    return finish_plan(
        req,
        order=fill.order,
        real_nodes=fill.real_nodes,
        real_edges=fill.real_edges,
        offsets=fill.offsets,
        pad_nodes=np.full(nb, shape.n_node, dtype=np.int64),
        pad_edges=np.full(nb, shape.n_edge, dtype=np.int64),
        pad_graphs=np.full(nb, shape.n_graph, dtype=np.int64),
        lower_bound=lower_bound,
        split=epoch.split,
        budget=budget,
        **meta,
    )


@dataclass
class _SeedSteps:
    """What the seed pass of a data-parallel plan hands the epoch's step fill: the distinct
    ``(n, e)`` pairs of the graphs (the same in any order) and its number of steps."""

    pairs: SizePairs
    steps: int


@dataclass
class _Epoch:
    """The kept graphs of one epoch in its order (``kept``, int32 below 2**31 graphs, possibly
    a view of shuffled items) with their narrow sizes; ``split`` is the oversize split without
    them (what `finish_plan` needs)."""

    kept: np.ndarray | None
    nodes: np.ndarray | None
    edges: np.ndarray | None
    split: OversizeSplit
    totals: tuple[int, int]
    count: int

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(kept, nodes, edges)``, dropped from here (their memory goes with the caller)."""
        kept, nodes, edges = self.kept, self.nodes, self.edges
        if kept is None or nodes is None or edges is None:
            raise RuntimeError("the graphs of this epoch were already taken")
        self.kept = self.nodes = self.edges = None
        return kept, nodes, edges


class _StepHint(TypedDict, total=False):
    """`step_fill` arguments from the seed pass (`_SeedSteps`)."""

    fill: float
    steps: int
    pairs: SizePairs


@dataclass
class _Fill:
    """Batches of one epoch: graphs in batch order, boundaries and real totals (int64)."""

    order: np.ndarray
    offsets: np.ndarray
    real_nodes: np.ndarray
    real_edges: np.ndarray
    step_fill: bool = False


def _seed_shape(
    graphs: _Graphs, budget: Budget, seed: int, ranks: int
) -> tuple[Budget, _SeedSteps | None]:
    """``(shape, seed steps or None)``: the tight shape, the largest batch of the fill over a
    seed-drawn order of the kept graphs (the same every epoch; each epoch then fills up to that
    shape). With several ranks it is the step fill's, with 0.3% room for an epoch's own
    imbalance within a step (never above the budget, rounded up in integers)."""
    seed_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(5,)))
    nodes, edges = graphs.seed_order_sizes(seed_rng)
    seed_steps = None
    if ranks > 1:
        pairs = SizePairs(nodes, edges)  # the same in the epoch order (one scan)
        seed_fill = step_fill(nodes, edges, budget, ranks, with_order=False, pairs=pairs)
        seed_steps = _SeedSteps(pairs, (seed_fill.offsets.shape[0] - 1) // ranks)
        # 0.3% room, rounded up in integers, never above the budget
        real_nodes = np.minimum((seed_fill.real_nodes * 1003 + 999) // 1000, budget.node_capacity)
        real_edges = np.minimum((seed_fill.real_edges * 1003 + 999) // 1000, budget.edge_capacity)
    else:
        real_nodes, real_edges = greedy_fill(nodes, edges, budget)[1:]
    return Budget(int(real_nodes.max()) + 1, int(real_edges.max()), budget.n_graph), seed_steps


def _memo_seed_shape(
    req: PlanRequest, graphs: _Graphs, budget: Budget
) -> tuple[Budget, _SeedSteps | None]:
    """`_seed_shape` of the request, made once per schedule (it depends on the sizes, the
    budget and the seed only)."""
    return once_per_schedule(
        req,
        ("dynamic-seed-shape", budget.as_tuple()),
        lambda: _seed_shape(graphs, budget, req.seed, req.world_size),
        lambda made: (made[1].pairs.pairs if made[1] is not None else None,),
    )


def _greedy_fill(epoch: _Epoch, shape: Budget) -> _Fill:
    """The greedy fill of the epoch's graphs in their order."""
    kept, nodes, edges = epoch.take()
    return _Fill(kept, *greedy_fill(nodes, edges, shape))


def _step_or_greedy_fill(
    epoch: _Epoch,
    shape: Budget,
    ranks: int,
    seed_steps: _SeedSteps | None,
    perm_out: np.ndarray | None,
) -> _Fill:
    """Data-parallel: steps of ``ranks`` evenly filled batches (`step_fill`, a multiple of
    ``ranks`` batches in all), kept when it needs no more batches than the greedy fill split
    to a multiple of ranks, i.e. when the greedy fill needs more than (step batches - ranks):
    the greedy fill stops as soon as that is known. Else the greedy fill."""
    kept, nodes, edges = epoch.take()
    hint: _StepHint = (
        {}
        if seed_steps is None
        else {"fill": 1.0, "steps": seed_steps.steps, "pairs": seed_steps.pairs}
    )
    steps = step_fill(nodes, edges, shape, ranks, perm_out=perm_out, totals=epoch.totals, **hint)
    if not (np.diff(steps.offsets) > 0).all():
        return _Fill(kept, *greedy_fill(nodes, edges, shape))
    greedy = greedy_fill(
        nodes, edges, shape, stop_at=steps.offsets.shape[0] - 1 - ranks + 1, totals=epoch.totals
    )
    if greedy is not None:
        return _Fill(kept, *greedy)
    assert steps.order is not None  # (with_order)
    # kept[order], written over the order
    ordered = take_into(kept, steps.order)
    return _Fill(ordered, steps.offsets, steps.real_nodes, steps.real_edges, step_fill=True)


class _Graphs:
    """The size table of a `dynamic` request with its oversize policy applied, and the
    per-graph memory reused across the plan's phases (memory already faulted in is reused:
    filling fresh pages costs ~1 ns a byte). Sizes are packed into one int32 per graph
    (`PackedSizes`) and read in random orders through it. With no oversize graph and a
    shuffled epoch, the seed pass's and the epoch's orders are drawn by shuffling int64 items
    that carry each graph's sizes (`PackedSizes.shuffled`, no gather in random order), in one
    buffer that then holds the plan's int64 order; the packed sizes' buffer takes the step
    fill's order."""

    def __init__(self, req: PlanRequest, budget: Budget) -> None:
        self.req, self.budget = req, budget
        sizes = req.sizes
        self.packed: PackedSizes | None = PackedSizes(sizes.n_node, sizes.n_edge)
        # with no oversize graph the epoch order is drawn after the seed pass (independent
        # streams)
        self.split: OversizeSplit | None = (
            split_oversize(req, _epoch_order(req), budget, narrow=True, packed=self.packed)
            if any_oversize(sizes.n_node, sizes.n_edge, budget)
            else None
        )
        self.n_kept = len(sizes) if self.split is None else self.split.kept_graphs().shape[0]
        self.reuse = (
            self.split is None
            and req.shuffle
            and self.packed.packed is not None
            and self.n_kept < 2**31
        )
        self.items = np.empty(self.n_kept, np.int64) if self.reuse else None
        self._order_buffer: np.ndarray | None = None

    def _packed_sizes(self) -> PackedSizes:
        """The table's packed sizes (released by `epoch`)."""
        if self.packed is None:
            raise RuntimeError("the packed sizes were released by epoch()")
        return self.packed

    def seed_order_sizes(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sizes of the kept graphs in a seed-drawn order (the kept graphs in dataset order,
        drawn by the same permutation as the whole table), narrow."""
        kept_sorted = None if self.split is None else np.sort(self.split.kept_graphs())
        packed = self._packed_sizes()
        if packed.packed is not None and self.n_kept < 2**31:  # sizes through the shuffle
            return packed.shuffled(rng, kept_sorted, out=self.items)[1:]
        order = _permutation(rng, self.n_kept)
        if kept_sorted is not None:
            order = kept_sorted[order]
        return packed.gather(order)

    def epoch(self) -> _Epoch:
        """This epoch's kept graphs in order with their sizes (in the items' buffer when
        reused); the packed sizes are dropped, or kept as the step fill's order buffer."""
        req, budget = self.req, self.budget
        packed = self._packed_sizes()
        if self.reuse:  # the epoch order and its sizes from one shuffle
            order, nodes, edges = packed.shuffled(req.epoch_rng(), with_order=True, out=self.items)
            assert order is not None  # (with_order)
            split = split_oversize(req, order, budget, gathered=(nodes, edges))
        elif self.split is None:
            split = split_oversize(req, _epoch_order(req), budget, narrow=True, packed=packed)
        else:
            split = self.split
        if self.reuse and req.world_size > 1:
            self._order_buffer = packed.packed  # int32, one per graph
        del packed
        self.packed = self.split = None
        kept = split.kept_graphs()
        nodes, edges = split.kept_sizes()
        totals = (int(nodes.sum(dtype=np.int64)), int(edges.sum(dtype=np.int64)))
        # finish_plan needs none of them (the kept order may be a view of the items)
        return _Epoch(
            kept,
            nodes,
            edges,
            replace(split, kept=None, kept_nodes=None, kept_edges=None),
            totals,
            kept.shape[0],
        )

    def order_buffer(self) -> np.ndarray | None:
        """An int32 array of one item per graph for the step fill's order (``None``: none to
        reuse); handed over once."""
        out, self._order_buffer = self._order_buffer, None
        return out

    def with_plan_order(self, fill: _Fill) -> _Fill:
        """``fill`` with the plan's order in place of the fill's: widened to int64 over the
        items' buffer when it was reused (the fill's int32 order is then released), else its
        own contiguous copy (a strided view of shuffled int64 items holds 8 bytes a graph: the
        items are freed before the plan is built)."""
        items, self.items = self.items, None
        if items is not None:
            return replace(fill, order=widen_into(fill.order, items))
        return replace(fill, order=np.ascontiguousarray(fill.order))


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
