"""Distributed plans: any single-device plan dealt into steps of ``world_size`` equal-shape batches.

Appendix F of the static-vs-dynamic paper: data-parallel devices (``pmap``, DDP) need every
device's batch of one step to have the same padded shape; static-64/2^N batches rarely do. Here
batches are sorted by padded shape, then by real nodes and edges (`balanced_sequence`), and cut
into steps of ``R`` consecutive batches, so a step holds batches of equal (or nearly equal) shape
and similar load; each step is padded to the elementwise maximum shape of its batches. When ``B``
is not a multiple of ``R``,
the ``S·R - B`` missing batches are padding-only batches (no graph, the step's shape) placed in
the step of the lightest batches. No graph is repeated or dropped (unlike torch's
``DistributedSampler``, which repeats samples to even out ranks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np

from .._errors import InputError
from .._plan import BatchPlan
from .._sizes import GraphSizes
from .._validate import as_positive_int
from ..packing.kernels import batch_totals, gather_batches, gather_counts, widen_into
from ._registry import PlanRequest

__all__ = ["distribute_plan", "plan_for_ranks", "balanced_sequence", "split_to_multiple"]


def _step_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4, epoch)))


def balanced_sequence(plan: BatchPlan, world_size: int) -> np.ndarray:
    """Batch indices ordered so that consecutive runs of ``world_size`` share a shape and load.

    Two-level sort balancing both real nodes and real edges: batches sorted by padded shape,
    then real nodes, are cut into blocks of ``world_size * g`` (``g = ceil(sqrt(steps))``); each
    block is re-sorted by shape, then real edges. A run of ``world_size`` consecutive batches
    therefore has nodes within one block's narrow range and nearly equal edges.
    """
    nb = len(plan)
    shape_keys = (plan.pad_graphs, plan.pad_edges, plan.pad_nodes)
    idx = _stable_lexsort((plan.real_nodes, *shape_keys))
    steps = -(-nb // world_size)
    block = world_size * max(1, _ceil_sqrt(steps))
    block_id = np.arange(nb) // block
    edges_keys = (plan.real_edges[idx], *(k[idx] for k in shape_keys), block_id)
    return idx[_stable_lexsort(edges_keys)]


def _ceil_sqrt(n: int) -> int:
    """``ceil(sqrt(n))`` of an integer, exactly."""
    return 0 if n <= 0 else math.isqrt(n - 1) + 1


def _stable_lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (last key most significant, ties in index order) of int arrays,
    int64: keys of one value dropped, the others folded into one int64 key where their ranges
    allow and sorted by one stable argsort (a radix sort below 2**16); else ``np.lexsort``."""
    n = keys[0].shape[0]
    folded: np.ndarray | None = None
    span = 1
    for k in keys:  # least significant first
        if n == 0:
            break
        lo, hi = int(k.min()), int(k.max())
        if lo == hi:
            continue
        if span * (hi - lo + 1) >= 2**62:
            return np.lexsort(keys).astype(np.int64)
        part = k.astype(np.int64) - lo
        if folded is None:
            folded = part
        else:
            part *= span
            folded += part
        span *= hi - lo + 1
    if folded is None:
        return np.arange(n, dtype=np.int64)
    if span <= 2**16:
        folded = folded.astype(np.uint16)
    return np.argsort(folded, kind="stable").astype(np.int64, copy=False)


def _first_largest_ratio(num: np.ndarray, den: np.ndarray) -> int:
    """Index of the first largest ``num[i] / den[i]`` (integers, ``den > 0``), exactly: the
    float quotients (correctly rounded from exact operands, so never above the float of a
    larger ratio) narrow it down to the largest floats, which are compared as fractions."""
    f = num.astype(np.float64) / den
    top = np.flatnonzero(f == f.max())
    if top.shape[0] == 1:
        return int(top[0])
    best = int(top[0])
    for i in top[1:].tolist():  # a / b > c / d  <=>  a d > c b
        if int(num[i]) * int(den[best]) > int(num[best]) * int(den[i]):
            best = i
    return best


def split_to_multiple(plan: BatchPlan, sizes: GraphSizes, world_size: int) -> BatchPlan:
    """The plan with batches split in two (largest real node totals first, each into halves
    by graph count) until their number is a multiple of ``world_size`` (or, with fewer graphs
    than that, until every batch holds one graph); a part of a batch fits that batch's padded
    shape, so every rule of the plan still holds. Returns ``plan`` itself when nothing splits.
    """
    nb, r = len(plan), int(world_size)
    gpb = plan.graphs_per_batch.astype(np.int64)
    target = min(-(-nb // r) * r, int(gpb.sum()))  # too few graphs: one graph per batch
    if target <= nb:
        return plan
    # per original batch: graph counts of its parts (only split batches are listed)
    parts_of: dict[int, list[int]] = {}
    top = gpb.copy()  # each batch's largest part
    n_parts = np.ones(nb, np.int64)
    need = target - nb
    # split the batch whose largest part holds the most graphs, ties by real nodes per part
    # (then the first batch), compared exactly; one vectorised pick per split
    load = plan.real_nodes if plan.real_nodes is not None else gpb
    while need:
        cand = np.flatnonzero(top == top.max())
        b = int(cand[_first_largest_ratio(load[cand], n_parts[cand])])
        parts = parts_of.setdefault(b, [int(gpb[b])])
        k = parts.index(max(parts))
        if parts[k] < 2:
            break
        parts[k : k + 1] = [parts[k] - parts[k] // 2, parts[k] // 2]
        top[b], n_parts[b] = max(parts), len(parts)
        need -= 1
    parent = np.repeat(np.arange(nb, dtype=np.int64), n_parts)
    sub = gpb[parent]
    first = np.zeros(nb + 1, np.int64)
    np.cumsum(n_parts, out=first[1:])
    for b, parts in parts_of.items():
        sub[first[b] : first[b + 1]] = parts
    offsets = np.concatenate([[0], np.cumsum(sub)]).astype(np.int64)
    order = plan.order
    # real totals: an unsplit batch keeps the plan's; the parts of split batches are summed
    # from the size table (their graphs only, not a gather of the whole epoch)
    split = np.flatnonzero(n_parts > 1)
    part_of_split = (
        np.concatenate([np.arange(first[b], first[b + 1]) for b in split.tolist()])
        if split.size
        else np.zeros(0, np.int64)
    )

    @overload
    def totals(column: np.ndarray, plan_totals: np.ndarray | None) -> np.ndarray: ...

    @overload
    def totals(column: np.ndarray | None, plan_totals: np.ndarray | None) -> np.ndarray | None: ...

    def totals(column: np.ndarray | None, plan_totals: np.ndarray | None) -> np.ndarray | None:
        if column is None:
            return None
        if plan_totals is None:
            return batch_totals(gather_counts(column, order), offsets)
        out = plan_totals[parent]
        for q in part_of_split.tolist():
            out[q] = int(column[order[offsets[q] : offsets[q + 1]]].sum())
        return out

    meta = dict(plan.meta)
    meta["split_batches"] = int(len(sub) - nb)
    return BatchPlan(
        order,
        offsets,
        plan.pad_nodes[parent],
        plan.pad_edges[parent],
        plan.pad_graphs[parent],
        plan.skipped,
        real_nodes=totals(sizes.n_node, plan.real_nodes),
        real_edges=totals(sizes.n_edge, plan.real_edges),
        real_cost=totals(sizes.n_bytes, plan.real_cost),
        meta=meta,
    )


def distribute_plan(
    plan: BatchPlan,
    world_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    sizes: GraphSizes | None = None,
) -> BatchPlan:
    """A step-major plan of ``ceil(B / R)`` steps x ``R`` ranks from the single-device ``plan``.

    Batch ``s * R + r`` is rank ``r``'s batch of step ``s``; arrays ``rank``/``step`` say so.
    Steps come in a per-``(seed, epoch)`` random order and ranks within a step are a random
    permutation when ``shuffle``; otherwise steps follow the original batch order. Steps are
    formed by `balanced_sequence` (shape first, then real nodes and real edges). With the
    plan's ``sizes``, batches are first split until their number is a multiple of ``R``
    (`split_to_multiple`), so padding-only batches remain only when the graphs are fewer than
    ``R * ceil(B / R)`` (then ``R * ceil(B / R) - graphs`` of them). ``plan`` is left as it is.
    """
    return _distribute(
        plan, world_size, seed=seed, epoch=epoch, shuffle=shuffle, sizes=sizes, owned=False
    )


def plan_for_ranks(strategy: Callable[[PlanRequest], BatchPlan], request: PlanRequest) -> BatchPlan:
    """``strategy``'s plan of ``request``, dealt into steps of ``request.world_size`` batches
    (`distribute_plan`) when there are several ranks.

    The single-device plan is made here and never leaves this function, so its int64 order can
    be reused for the distributed plan's (the new order is gathered as int32 below 2**31 graphs
    and widened over it: one int64 array of the epoch less at the peak). This is the only
    caller that lets `_distribute` overwrite a plan."""
    if request.world_size == 1:
        return strategy(request)
    return _distribute(
        strategy(request),
        request.world_size,
        seed=request.seed,
        epoch=request.epoch,
        shuffle=request.shuffle,
        sizes=request.sizes,
        owned=True,
    )


def _distribute(
    plan: BatchPlan,
    world_size: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    sizes: GraphSizes | None,
    owned: bool,
) -> BatchPlan:
    """`distribute_plan`; ``owned=True`` (`plan_for_ranks` only): nobody else holds ``plan``,
    whose order is overwritten by the new one."""
    r = as_positive_int(world_size, "world_size")
    if plan.rank is not None or plan.step is not None:
        raise InputError(
            f"plan is already distributed (it has rank/step arrays for "
            f"{len(plan)} batches); distribute a single-device plan"
        )
    if sizes is not None:
        plan = split_to_multiple(plan, sizes, r)
    nb = len(plan)
    steps = -(-nb // r)
    n_empty = steps * r - nb
    src, (s_nodes, s_edges, s_graphs) = _step_slots(plan, r, steps, n_empty, seed, epoch, shuffle)
    is_real = src >= 0
    # batch indices as int32 where they fit (alive during the gather, the peak of memory)
    safe = np.where(is_real, src, 0).astype(np.int32 if nb < 2**31 else np.int64)
    del src
    offsets = _offsets(np.where(is_real, plan.graphs_per_batch[safe], 0))
    starts = np.where(is_real, plan.offsets[:-1][safe], 0)
    if int(offsets[-1]) < 2**31:
        starts = starts.astype(np.int32)
    reuse = (
        owned
        and sizes is not None
        and len(sizes) < 2**31
        and plan.order.dtype == np.int64
        and plan.order.shape[0] == int(offsets[-1])
    )
    order = _gather_order(plan.order, starts, offsets, reuse)

    @overload
    def per_batch(values: np.ndarray) -> np.ndarray: ...

    @overload
    def per_batch(values: np.ndarray | None) -> np.ndarray | None: ...

    def per_batch(values: np.ndarray | None) -> np.ndarray | None:
        if values is None:
            return None
        return np.where(is_real, values[safe], 0)

    meta = dict(plan.meta)
    lb_single = int(meta.get("lower_bound", nb))
    meta.update(
        world_size=r,
        num_steps=steps,
        padding_only_batches=n_empty,
        lower_bound_single=lb_single,
        lower_bound=r * (-(-lb_single // r)),
    )
    return BatchPlan(
        order,
        offsets,
        np.repeat(s_nodes, r),
        np.repeat(s_edges, r),
        np.repeat(s_graphs, r),
        plan.skipped,
        real_nodes=per_batch(plan.real_nodes),
        real_edges=per_batch(plan.real_edges),
        real_cost=per_batch(plan.real_cost),
        rank=np.tile(np.arange(r, dtype=np.int64), steps),
        step=np.repeat(np.arange(steps, dtype=np.int64), r),
        meta=meta,
    )


def _step_slots(
    plan: BatchPlan, r: int, steps: int, n_empty: int, seed: int, epoch: int, shuffle: bool
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """``(src, (nodes, edges, graphs))``: the plan's batch for each slot of the steps (step
    major, ``-1``: a padding-only batch), and each step's padded shape (the elementwise
    maximum of its batches')."""
    by_shape = balanced_sequence(plan, r)
    # slot sequence: empties first (they join the lightest batches of the smallest shape)
    slots = np.concatenate([np.full(n_empty, -1, dtype=np.int64), by_shape])
    grid = slots.reshape(steps, r)  # [S, R] original batch id or -1
    real = grid >= 0
    safe = np.where(real, grid, 0)

    def step_max(values: np.ndarray) -> np.ndarray:
        return np.where(real, values[safe], np.iinfo(np.int64).min).max(axis=1)

    shape = (step_max(plan.pad_nodes), step_max(plan.pad_edges), step_max(plan.pad_graphs))
    if shuffle:
        rng = _step_rng(seed, epoch)
        step_order = rng.permutation(steps)
        rank_perm = np.argsort(rng.random((steps, r)), axis=1, kind="stable")
        grid = np.take_along_axis(grid, rank_perm, axis=1)
    else:
        first = np.where(real, grid, np.iinfo(np.int64).max).min(axis=1)
        step_order = np.argsort(first, kind="stable")
        key = np.where(grid >= 0, grid, np.iinfo(np.int64).max)
        grid = np.take_along_axis(grid, np.argsort(key, axis=1, kind="stable"), axis=1)
    return grid[step_order].reshape(-1), tuple(x[step_order] for x in shape)


def _offsets(sizes: np.ndarray) -> np.ndarray:
    """Batch boundaries (int64) of batches of ``sizes`` graphs."""
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def _gather_order(
    old: np.ndarray, starts: np.ndarray, offsets: np.ndarray, reuse: bool
) -> np.ndarray:
    """The new order (`gather_batches`); ``reuse``: gathered as int32 (graph indices below
    2**31) and widened over ``old`` itself, whose owner gave it up."""
    if not reuse:
        return gather_batches(old, starts, offsets)
    return widen_into(gather_batches(old, starts, offsets, np.int32), old)
