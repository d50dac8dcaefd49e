"""Balanced dealing: fill a fixed number of packs evenly, then repair. For limits that hold many
graphs, where best fit by decreasing size leaves the last packs short of graphs or of one
component.

Graphs sorted by decreasing size ``s = wn * nodes/node_limit + we * edges/edge_limit`` (quantised
to int64 once, `_dealing_key`: loads are exact integer sums) are dealt
to ``P`` packs one row of ``P`` graphs at a time; within a row the largest graph goes to the
pack with the smallest load (``s`` summed), the next largest to the next, and so on (longest
processing time first, applied row by row, so each pack gets one graph of every size rank and
the load spread stays about one of the last, smallest graphs). The weights ``wn, we`` favour the
component whose total is closer to its capacity. Packs over a limit give back graphs (the
smallest one that cures the excess, else the largest) which are then packed best-fit into the
room left in all packs, opening new packs only when needed. ``P`` starts at the lower bound and
a few slightly larger values are tried; the fewest packs win.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._errors import InputError
from .._exact import decimal, quantise_linear, share_keys, top_indices
from ._dealing import Dealer, PreloadedDealer, SlotsDealer, SnakeDealer, bin_dtype, row_chunks
from ._exchange import spill, swap_repair
from ._greedy import batches_lower_bound
from ._histogram import pack_histogram
from ._patterns import PackPatterns

__all__ = ["balanced_pack", "BalancedPacking", "DEFAULT_TRIES"]

#: Extra packs tried above the lower bound, as fractions of it.
DEFAULT_TRIES = (0.0, 0.0005, 0.001, 0.003, 0.008)


@dataclass(frozen=True)
class BalancedPacking:
    """Packs as slots: pack ``p`` holds graphs of bins ``slot_bin[offsets[p]:offsets[p+1]]``.

    ``dealt_packs`` is the ``P`` the dealing used; the rest were opened by the repair.
    """

    slot_bin: np.ndarray
    offsets: np.ndarray
    dealt_packs: int

    @property
    def num_packs(self) -> int:
        return int(self.offsets.shape[0] - 1)


def _dealing_key(
    n: NDArray[np.int64],
    e: NDArray[np.int64],
    count: NDArray[np.int64],
    node_limit: int,
    edge_limit: int,
) -> tuple[np.ndarray, int]:
    """Each bin's size as the dealing weighs it, ``wn * n / node_limit + we * e / edge_limit``
    with weights ``w`` the components' totals over their capacities (only their ratio
    matters), quantised once to int64 (`quantise_linear`: integer keys whose sum over the
    table stays below 2**53). Returns the keys and the key of a full pack (its capacity)."""
    node_cap, edge_cap = max(int(node_limit), 1), max(int(edge_limit), 1)
    total_n = sum(int(a) * int(c) for a, c in zip(n.tolist(), count.tolist(), strict=False))
    total_e = sum(int(a) * int(c) for a, c in zip(e.tolist(), count.tolist(), strict=False))
    cost = quantise_linear(
        Fraction(total_n, node_cap * node_cap),
        Fraction(total_e, edge_cap * edge_cap),
        total_n,
        total_e,
        what="balanced dealing",
    )
    return cost.costs(n, e), cost.cost(node_cap, edge_cap)


#: The spilled graphs' repair in `_try`: ``(patterns, base, room)`` of `pack_histogram` over
#: the room left in the dealt packs ``room``.
_Repair = tuple[PackPatterns, NDArray[np.int64], NDArray[np.intp]]


def _try(
    bin_nodes: NDArray[np.int64],
    bin_edges: NDArray[np.int64],
    P: int,
    limits: tuple[int, int, int],
    heuristic: str,
    dealer: Dealer,
    max_room: int = 2048,
) -> tuple[int, tuple[np.ndarray, _Repair | None]]:
    """One try of `balanced_pack` at ``P`` dealt packs: deal, repair by exchanges, spill what
    is still over a limit and pack it best-fit into the room left (at most ``max_room`` packs
    offered) and new packs. Returns ``(packs in all, (grid, the spilled graphs' repair or
    None))``."""
    node_cap, edge_cap, graph_cap = limits
    grid = dealer.deal(P)
    P = grid.shape[0]
    grid = swap_repair(bin_nodes, bin_edges, grid, limits)
    removed, grid, (load_n, load_e, load_k) = spill(bin_nodes, bin_edges, grid, limits)
    if removed.size == 0:
        return P, (grid, None)
    spill_count = np.bincount(removed, minlength=bin_nodes.shape[0])
    left_n, left_e, left_k = node_cap - load_n, edge_cap - load_e, graph_cap - load_k
    room = np.flatnonzero(
        (left_k > 0) & (left_n >= bin_nodes[removed].min()) & (left_e >= bin_edges[removed].min())
    )
    if room.size > max_room:  # offer the packs with the most room (keeps the search short)
        slack = share_keys(left_n[room], left_e[room], node_cap, edge_cap, "min")
        room = np.sort(room[top_indices(slack, max_room)])
    pats, base = pack_histogram(
        bin_nodes,
        bin_edges,
        spill_count,
        node_limit=node_cap,
        edge_limit=edge_cap,
        graph_limit=graph_cap,
        heuristic=heuristic,
        fit="best",
        initial=(left_n[room], left_e[room], left_k[room]),
        return_base=True,
    )
    new = int(pats.count[base < 0].sum())
    return P + new, (grid, (pats, base, room))


def balanced_pack(
    n: ArrayLike,
    e: ArrayLike,
    count: ArrayLike,
    *,
    node_limit: int,
    edge_limit: int,
    graph_limit: int,
    heuristic: str = "product",
    tries: Sequence[float] = DEFAULT_TRIES,
) -> BalancedPacking:
    """Pack a histogram by balanced dealing into ``P`` packs plus repair (see module doc).

    Limits are real-content capacities per pack; every bin must fit them alone. Returns a
    `BalancedPacking` whose ``slot_bin`` refers to the input bins.
    """
    n = np.asarray(n, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    node_limit, edge_limit, graph_limit = int(node_limit), int(edge_limit), int(graph_limit)
    if node_limit < 0 or edge_limit < 0 or graph_limit < 1:
        raise InputError(
            f"limits must be positive, got {node_limit} nodes / {edge_limit} edges "
            f"/ {graph_limit} graphs"
        )
    if n.shape[0] and ((n > node_limit) | (e > edge_limit))[count > 0].any():
        raise InputError(f"a bin exceeds the limits {node_limit} nodes / {edge_limit} edges")
    key, cap_key = _dealing_key(n, e, count, node_limit, edge_limit)
    order = np.lexsort((-e, -n, -key))
    order = order[count[order] > 0]
    bin_nodes, bin_edges, bin_count = n[order], e[order], count[order]
    end = np.cumsum(bin_count)
    N = int(end[-1]) if end.size else 0
    if N == 0:
        return BalancedPacking(np.zeros(0, np.int64), np.zeros(1, np.int64), 0)
    limits = (node_limit, edge_limit, graph_limit)
    lb = batches_lower_bound(
        sum(int(a) * int(c) for a, c in zip(bin_nodes.tolist(), bin_count.tolist(), strict=False)),
        sum(int(a) * int(c) for a, c in zip(bin_edges.tolist(), bin_count.tolist(), strict=False)),
        N,
        node_limit,
        edge_limit,
        graph_limit,
    )
    sorted_bins = _SortedBins(bin_nodes, bin_edges, bin_count, end, key[order], cap_key)
    dealers = _dealers(sorted_bins, limits, heuristic)
    _, P, (grid, repair) = _best_try(bin_nodes, bin_edges, N, lb, limits, heuristic, dealers, tries)
    P = grid.shape[0]
    extra, new_packs = _repair_packs(repair, P, grid.dtype, bin_nodes, bin_edges)
    slot_bin, offsets = _grid_slots(grid, extra, order, n.shape[0], new_packs)
    return BalancedPacking(slot_bin, offsets, P)


@dataclass(frozen=True)
class _SortedBins:
    """The non-empty bins sorted by decreasing dealing key: sizes, counts, cumulative counts
    ``end``, the keys and the key of a full pack ``cap_key`` (`_dealing_key`)."""

    nodes: NDArray[np.int64]
    edges: NDArray[np.int64]
    count: NDArray[np.int64]
    end: NDArray[np.int64]
    key: NDArray[np.int64]
    cap_key: int


def _dealers(bins: _SortedBins, limits: tuple[int, int, int], heuristic: str) -> list[Dealer]:
    """The dealings `balanced_pack` tries, in order: snake order alone; with graphs over a
    tenth of a limit, the two-resource dealing first, then snake order, then those graphs
    packed first (best fit) with the rest dealt around them (the variant with fewer packs
    wins)."""
    node_limit, edge_limit, graph_limit = limits
    big = (bins.nodes * 10 > node_limit) | (bins.edges * 10 > edge_limit)
    if not big.any():
        return [SnakeDealer(bins.end)]
    big_count = np.where(big, bins.count, 0)
    pats = pack_histogram(
        bins.nodes,
        bins.edges,
        big_count,
        node_limit=node_limit,
        edge_limit=edge_limit,
        graph_limit=graph_limit,
        heuristic=heuristic,
        fit="best",
    )
    pre_slot, pre_off = pats.slots()
    small_pos = np.repeat(np.flatnonzero(~big), bins.count[~big])
    big_pos = np.repeat(np.flatnonzero(big), bins.count[big])
    return [
        SlotsDealer(big_pos, small_pos, bins.key, bins.cap_key, graph_limit),
        SnakeDealer(bins.end),
        PreloadedDealer(small_pos, pre_slot, pre_off, bins.key),
    ]


def _best_try(
    bin_nodes: NDArray[np.int64],
    bin_edges: NDArray[np.int64],
    N: int,
    lb: int,
    limits: tuple[int, int, int],
    heuristic: str,
    dealers: list[Dealer],
    tries: Sequence[float],
) -> tuple[int, int, tuple[np.ndarray, _Repair | None]]:
    """The try (`_try`) with the fewest packs: ``(packs, dealt packs, detail)``. Each dealer
    tries ``P`` = the lower bound ``lb`` plus each fraction of ``tries`` of it (at most the
    ``N`` graphs), stopping when more dealt packs stop paying off; a packing at the lower
    bound ends the search."""
    best: tuple[int, int, tuple[np.ndarray, _Repair | None]] | None = None
    for dealer in dealers:
        if best is not None and best[0] <= lb:
            break
        prev = None
        for try_f in tries:
            fraction = decimal(try_f)
            P = min(lb + -(-lb * fraction.numerator // fraction.denominator), N)
            if prev is not None and prev <= P:
                break
            total, detail = _try(bin_nodes, bin_edges, P, limits, heuristic, dealer)
            if prev is not None and total >= prev:
                break  # more dealt packs stopped paying off
            prev = total
            if best is None or total < best[0]:
                best = (total, P, detail)
            if total == P:
                break
    assert best is not None  # (at least one dealer and one try)
    return best


def _repair_packs(
    repair: _Repair | None,
    P: int,
    dtype: np.dtype[Any],
    bin_nodes: NDArray[np.int64],
    bin_edges: NDArray[np.int64],
) -> tuple[np.ndarray | None, PackPatterns | None]:
    """Where the spilled graphs went (`_try`'s repair): ``(extra, new_packs)``, ``extra`` the
    extra columns of the ``P`` dealt packs (``dtype``, ``-1`` = empty; ``None``: none) and
    ``new_packs`` the patterns of the packs the repair opened (``None``: none)."""
    if repair is None:
        return None, None
    pats, base, room = repair
    extra = None
    # graphs the repair put into dealt packs become extra columns of the grid
    items = np.repeat(pats.bins, pats.copies)
    item_pat = np.repeat(
        np.repeat(np.arange(pats.num_patterns), np.diff(pats.offsets)), pats.copies
    )
    keep = base[item_pat] >= 0
    add_item, add_pack = items[keep], room[base[item_pat[keep]]]
    if add_pack.size:
        o = np.argsort(add_pack, kind="stable")
        add_pack, add_item = add_pack[o], add_item[o]
        col = np.arange(add_pack.shape[0]) - np.searchsorted(add_pack, add_pack, "left")
        extra = np.full((P, int(col.max()) + 1), -1, dtype)
        extra[add_pack, col] = add_item
    if not (base < 0).any():
        return extra, None
    opened = np.flatnonzero(base < 0)
    lens = np.diff(pats.offsets)
    entry = np.repeat(base < 0, lens)
    new_packs = PackPatterns.build(
        pats.bins[entry],
        pats.copies[entry],
        np.concatenate([[0], np.cumsum(lens[opened])]),
        pats.count[opened],
        bin_nodes,
        bin_edges,
    )
    return extra, new_packs


def _grid_slots(
    grid: np.ndarray,
    extra: np.ndarray | None,
    order: np.ndarray,
    num_bins: int,
    new_packs: PackPatterns | None,
) -> tuple[np.ndarray, NDArray[np.int64]]:
    """Slots of the dealt packs (``grid`` rows, then the ``extra`` columns of each row, empty
    entries skipped) and of the repair's new packs ``new_packs``, as input bins (``order`` maps the
    sorted bins to them) of the narrowest dtype (`bin_dtype`); built chunk by chunk of rows.
    Returns ``(slot_bin, int64 offsets)``."""
    P = grid.shape[0]
    width = grid.shape[1] + (0 if extra is None else extra.shape[1])
    sizes = np.empty(P, np.int64)
    for p0, p1 in row_chunks(P, width):
        sizes[p0:p1] = (grid[p0:p1] >= 0).sum(axis=1)
        if extra is not None:
            sizes[p0:p1] += (extra[p0:p1] >= 0).sum(axis=1)
    new_slot_bin, new_offsets = (
        new_packs.slots()
        if new_packs is not None
        else (np.zeros(0, np.int64), np.zeros(1, np.int64))
    )
    offsets = np.zeros(P + new_offsets.shape[0], np.int64)
    np.cumsum(sizes, out=offsets[1 : P + 1])
    offsets[P + 1 :] = offsets[P] + new_offsets[1:]
    dt = bin_dtype(num_bins)
    to_bin = order.astype(dt)
    slot_bin = np.empty(int(offsets[-1]), dt)
    for p0, p1 in row_chunks(P, width):
        rows = grid[p0:p1] if extra is None else np.concatenate([grid[p0:p1], extra[p0:p1]], axis=1)
        flat = rows.reshape(-1)
        slot_bin[offsets[p0] : offsets[p1]] = to_bin[flat[flat >= 0]]
    slot_bin[offsets[P] :] = to_bin[new_slot_bin]
    return slot_bin, offsets
