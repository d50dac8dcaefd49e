"""Candidate packs of ``pack-lpf``/``pack-spf`` besides the histogram packing: balanced packs
(Karmarkar-Karp over rounds plus swap repair on each graph's bin, `balanced_packs`) and a
packing spread over more packs (`spread_packs`). Plain array kernels: bins, counts and slots
in, slots and pack offsets out."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._budget import Budget
from .._exact import abs_diff, share_keys, sortable
from . import _memory
from ._assign import group_by_key
from ._partition import balanced_ldm, columns_in_order, refine_in_place
from ._repair import repair_overflow
from ._totals import pack_totals

__all__ = ["balanced_packs", "cost_round_matrix", "equal_counts_cannot_fit", "spread_packs"]


def cost_round_matrix(
    graph_bin: NDArray[np.integer[Any]],
    bin_cost: NDArray[np.int64],
    bin_count: ArrayLike,
    num_packs: int,
) -> tuple[NDArray[np.int64], np.ndarray, int]:
    """`round_matrix` of the per-graph integer costs ``bin_cost[graph_bin]`` arranged by
    `balanced_ldm`, memory-lean, with each graph's bin in place of the graph: ``(value, bins,
    sum of the costs)``, ``bins[i, j] == graph_bin[ident[i, j]]`` for the identity matrix
    ``ident`` of the per-graph computation (``-1``: dummy) and the same values.

    The descending order (`descending_order`: costs descending, ties by graph index) is a
    counting sort of the graphs by the rank of their bin's cost (`group_by_key`) that writes
    the graphs' bins, not the graphs: Karmarkar-Karp looks only at the costs (``row_costs``)
    and rearranges whatever the matrix holds within its rounds, and the swap repair looks only
    at the values and the dummies, so the bins end where their graphs would. No per-graph cost
    array and no gather of the graphs' bins in a random order; the value matrix is filled from
    the arranged bins afterwards (never two float64 arrays of ``N``, nor one next to the
    differencing's work arrays). ``bin_count[k]``: the graphs of bin ``k``. The sum is the
    exact sum of the per-graph costs (a Python int, from the bins' counts)."""
    n, b = graph_bin.shape[0], int(num_packs)
    r = -(-n // b)
    bins = np.empty(r * b, graph_bin.dtype if graph_bin.dtype.kind == "i" else np.int64)
    bins[n:] = -1
    uniq, inv = np.unique(bin_cost, return_inverse=True)
    rank = uniq.shape[0] - 1 - inv.reshape(-1)  # 0: the largest cost
    rank_count = np.zeros(uniq.shape[0], np.int64)
    np.add.at(rank_count, rank, np.asarray(bin_count, np.int64))
    group_by_key(graph_bin, rank_count, lookup=rank, values=graph_bin, out=bins[:n])
    bins = bins.reshape(r, b)

    def row_costs(idx: np.ndarray) -> NDArray[np.int64]:
        real = idx >= 0
        return np.where(real, bin_cost[np.where(real, idx, 0)], 0)

    balanced_ldm(None, bins, inplace=True, row_costs=row_costs)
    value = np.empty(r * b, np.int64)
    flat = bins.reshape(-1)
    step = _memory.PARTITION_CHUNK
    real_end = (r - 1) * b  # only the last round holds dummies (entries move within rounds)
    for s0 in range(0, r * b, step):
        s1 = min(s0 + step, r * b)
        if s1 <= real_end:
            np.take(bin_cost, flat[s0:s1], out=value[s0:s1])
        else:
            value[s0:s1] = row_costs(flat[s0:s1])
    total = sum(
        int(c) * int(k)
        for c, k in zip(np.asarray(bin_count).tolist(), bin_cost.tolist(), strict=False)
    )
    return value.reshape(r, b), bins, total


#: Swap-repair passes of the balanced candidates (the ``kk`` default).
_REFINE_PASSES = 16


class _HopelessRefine:
    """``stop`` rule for `refine_in_place`: ends the passes once the heaviest pack is further
    above ``full`` (the cost of a pack at the budget's capacities, which a fitting pack never
    exceeds) than the remaining passes could remove at the last pass's drop."""

    def __init__(self, full: int, passes: int) -> None:
        self.full, self.passes = int(full), int(passes)
        self.last: int | None = None
        self.stopped = False

    def __call__(self, index: int, heaviest: int) -> bool:
        heaviest = int(heaviest)
        drop = self.last - heaviest if self.last is not None else None
        self.last = heaviest
        # before any pass the drop is unbounded: never stopped then
        self.stopped = drop is not None and heaviest - self.full > drop * (self.passes - index)
        return self.stopped


def _optimal_max(cost_sum: int, num_packs: int) -> int:
    """A lower bound on the largest pack's load for integer per-graph costs summing to
    ``cost_sum``: the ceiling of the mean load."""
    return -(-int(cost_sum) // int(num_packs))


def equal_counts_cannot_fit(
    bin_nodes: ArrayLike, bin_edges: ArrayLike, bin_count: ArrayLike, num_packs: int, budget: Budget
) -> bool:
    """Whether no partition of the histogram's graphs into ``num_packs`` packs whose graph counts
    differ by at most one fits ``budget``: the pack holding the largest graph of a dimension also
    holds at least ``N // num_packs - 1`` others, no fewer than the smallest ones of the table
    (a necessary condition only; ``False`` says nothing)."""
    count = np.asarray(bin_count, np.int64)
    present = count > 0
    total = int(count.sum())
    q = total // int(num_packs)
    if q > budget.graph_capacity:
        return True
    if q < 2:
        return False
    for vals, cap in ((bin_nodes, budget.node_capacity), (bin_edges, budget.edge_capacity)):
        v = np.asarray(vals, np.int64)[present]
        c = count[present]
        order = np.argsort(v, kind="stable")
        v, c = v[order], c[order]
        take = np.minimum(c, np.maximum(q - 1 - np.concatenate([[0], np.cumsum(c)[:-1]]), 0))
        if int(v[-1]) + int((v * take).sum()) > cap:
            return True
    return False


def balanced_packs(
    graph_bin: NDArray[np.integer[Any]],
    bin_nodes: np.ndarray,
    bin_edges: np.ndarray,
    num_packs: int,
    budget: Budget,
) -> list[tuple[np.ndarray, NDArray[np.int64]] | None]:
    """A candidate packing into exactly ``num_packs`` packs (graph counts differing by at most
    one) that minimises the largest pack: Karmarkar-Karp over rounds plus swap repair
    (`packing._partition`, the ``kk`` kernels) on the integer cost ``nodes + edges`` of each
    graph (``kk``'s default model). ``graph_bin`` lists the graphs' bins in a seed- and
    epoch-free order (dataset order), so the packs depend on the sizes only. A candidate over
    a node or edge limit in some packs is repaired by swaps into the others' room
    (`packing._repair.repair_overflow`; graph counts unchanged). Returns ``[(slot_bin,
    offsets)]``, or ``[None]`` when it does not fit ``budget``."""
    bin_count = np.bincount(graph_bin, minlength=bin_nodes.shape[0])
    if equal_counts_cannot_fit(bin_nodes, bin_edges, bin_count, num_packs, budget):
        return [None]  # no balanced candidate can fit: skip the work
    # the round matrix arranged by Karmarkar-Karp (`balanced_ldm`), memory-lean; a graph's
    # cost is its bin's
    bin_cost = np.asarray(bin_nodes, np.int64) + np.asarray(bin_edges, np.int64)
    # the matrix holds each graph's bin in place of the graph: the swap repair looks only at
    # the values and the dummies, so its swaps are the same
    value, bins, total = cost_round_matrix(graph_bin, bin_cost, bin_count, num_packs)
    # no pack can load less than the mean's ceiling, so the swap repair stops at once where
    # Karmarkar-Karp already reached it (the usual case)
    hopeless = _HopelessRefine(budget.node_capacity + budget.edge_capacity, _REFINE_PASSES)
    refine_in_place(value, bins, _REFINE_PASSES, _optimal_max(total, num_packs), stop=hopeless)
    del value
    if hopeless.stopped:
        return [None]  # far over the budget, and the swaps were not closing the gap
    slot_bin, sizes = columns_in_order(bins, dtype=graph_bin.dtype)  # column = pack
    offsets = np.zeros(sizes.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    del bins
    pn, pe, pg = pack_totals(slot_bin, offsets, bin_nodes, bin_edges)
    if pg.max(initial=0) > budget.graph_capacity:
        return [None]
    if pn.max(initial=0) > budget.node_capacity or pe.max(initial=0) > budget.edge_capacity:
        # balanced but a few packs over a limit: swap graphs into the others' room
        fixed = repair_overflow(
            slot_bin, offsets, bin_nodes, bin_edges, budget.node_capacity, budget.edge_capacity
        )
        return [None if fixed is None else (fixed, offsets)]
    return [(slot_bin, offsets)]


def spread_packs(
    slot_bin: np.ndarray,
    offsets: NDArray[np.int64],
    count: int,
    bin_nodes: np.ndarray,
    bin_edges: np.ndarray,
    budget: Budget,
) -> tuple[np.ndarray, NDArray[np.int64]] | None:
    """The packs spread over ``count > P`` packs (``P`` the packs given): the ``count - P`` new
    packs take ``N // count`` graphs each, one graph at a time from the heaviest packs (load
    relative to the budget's capacities), the graph of each donor closest in size to the mean
    graph (relative distance in nodes plus edges), dealt to the new packs in snake order by
    size; the heaviest packs get lighter and no pack gets heavier. New packs above the largest
    totals of the packs given are repaired by swaps (`repair_overflow`) under those totals (the
    tight shape kept), else under the budget. ``None`` when there are too few graphs (``count``
    of them at least, every donor keeping one) or the repair fails."""
    p = offsets.shape[0] - 1
    extra = int(count) - p
    n = int(offsets[-1])
    g = n // int(count)
    take = extra * g
    sizes = np.diff(offsets)
    if extra <= 0 or g == 0 or take > n - p:
        return None
    node_counts = np.asarray(bin_nodes, np.int64)
    edge_counts = np.asarray(bin_edges, np.int64)
    node_cap, edge_cap = budget.node_capacity, budget.edge_capacity
    # sizes and loads relative to the capacities, compared exactly (integer keys)
    cost = sortable(share_keys(node_counts, edge_counts, node_cap, edge_cap))
    pack_nodes, pack_edges, _ = pack_totals(slot_bin, offsets, bin_nodes, bin_edges)
    load = sortable(share_keys(pack_nodes, pack_edges, node_cap, edge_cap))
    # donations per pack: round-robin over the packs, heaviest first, each keeping one graph
    donors = np.argsort(-load, kind="stable")
    rounds = -(-take // p)
    give = np.zeros(p, np.int64)
    give[donors] = np.minimum(rounds, np.maximum(0, (take - np.arange(p)) + p - 1) // p)
    if (sizes - give < 1).any() or give.sum() != take:
        return None
    # per donor, its `give` slots closest to the mean graph (nodes and edges relative to it);
    # only the donors' slots are looked at (memory-lean: no per-slot arrays of the epoch)
    # |node_counts / mean_n - 1| + |edge_counts / mean_e - 1| with mean = total / n, times both
    # totals: exact
    sum_n, sum_e = int(pack_nodes.sum()), int(pack_edges.sum())
    dist = sortable(
        share_keys(
            abs_diff(node_counts, n, sum_n),
            abs_diff(edge_counts, n, sum_e),
            max(sum_n, 1),
            max(sum_e, 1),
        )
    )
    donor = np.flatnonzero(give > 0)  # in pack order
    d_sizes = sizes[donor]
    d_first = np.concatenate([[0], np.cumsum(d_sizes)]).astype(np.int64)
    local = np.arange(int(d_first[-1])) - np.repeat(d_first[:-1], d_sizes)
    d_pack = np.repeat(np.arange(donor.shape[0]), d_sizes)
    slots = offsets[donor][d_pack] + local  # the donors' slots, pack after pack
    order = np.lexsort((dist[slot_bin[slots]], d_pack))  # by pack, then distance
    rank = np.arange(order.shape[0]) - d_first[d_pack[order]]  # within its pack's sorted slots
    moved = np.sort(slots[order[rank < give[donor][d_pack[order]]]])  # slot positions
    pool = slot_bin[moved]
    pool = pool[np.argsort(-cost[pool], kind="stable")]
    i = np.arange(take)
    r, j = i // extra, i % extra
    new_pack = np.where(r % 2 == 0, j, extra - 1 - j)
    new_slot_bin = pool[np.argsort(new_pack, kind="stable")]
    kept_sizes = sizes - give
    keep = np.ones(n, bool)
    keep[moved] = False
    out_slot_bin = np.empty(n, slot_bin.dtype)  # the kept slots in order, then the new packs'
    at = 0
    step = _memory.SPREAD_CHUNK
    for s0 in range(0, n, step):  # boolean masks by chunk (np.compress would build indices)
        kept = slot_bin[s0 : s0 + step][keep[s0 : s0 + step]]
        out_slot_bin[at : at + kept.shape[0]] = kept
        at += kept.shape[0]
    del keep
    out_slot_bin[n - take :] = new_slot_bin
    out_offsets = np.concatenate(
        [[0], np.cumsum(np.concatenate([kept_sizes, np.full(extra, g, np.int64)]))]
    ).astype(np.int64)
    new_nodes, new_edges, _ = pack_totals(
        new_slot_bin, np.arange(0, take + 1, g, dtype=np.int64), bin_nodes, bin_edges
    )
    if new_nodes.max() > pack_nodes.max() or new_edges.max() > pack_edges.max():
        # a new pack above the packs given: swaps into the others' room, under their largest
        # totals (the tight shape kept) or else under the budget
        for lim_n, lim_e in (
            (int(pack_nodes.max()), int(pack_edges.max())),
            (budget.node_capacity, budget.edge_capacity),
        ):
            fixed = repair_overflow(out_slot_bin, out_offsets, bin_nodes, bin_edges, lim_n, lim_e)
            if fixed is not None:
                return fixed, out_offsets
        return None
    return out_slot_bin, out_offsets
