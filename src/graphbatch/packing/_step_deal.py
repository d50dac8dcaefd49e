"""Dealing a block of steps at once, for `step_fill`: the graphs' share ranks (`ShareRanks`),
one sort of the whole block by (step, share) and the batches' real totals from one weighted
count. A step is dealt as `step_fill`'s per-step path deals it before any repair: its graphs by
share (``n / node_cap + e / edge_cap``, compared exactly), largest first, in snake order over
the ``ranks`` batches."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._exact import share_keys, sortable
from . import _memory

__all__ = ["SizePairs", "ShareRanks", "deal_block"]

#: Largest ``(max nodes + 1) * (max edges + 1)`` for which shares are ranked through a table.
_RANK_SPAN = 1 << 22
#: Most bits of the uint32 sort items of `deal_block` (more: int64 items; tests lower it).
_ITEM_BITS = 32
#: Node/edge totals of a batch are counted in one float64 weight below this (tests lower it).
_EXACT_FLOAT = 2**53


class SizePairs:
    """The distinct ``(n, e)`` pairs of some graphs as ``n * width + e`` (ascending), ``width``
    = largest edge count + 1; ``pairs`` is ``None`` where a size is negative or
    ``(max n + 1) * width`` is above `_RANK_SPAN`. The same for any order of the graphs."""

    def __init__(self, nodes: np.ndarray, edges: np.ndarray) -> None:
        self.pairs: NDArray[np.intp] | None = None
        self.width = 0
        if not nodes.shape[0]:
            return
        smallest = min(int(nodes.min()), int(edges.min()))
        top_n, top_e = int(nodes.max()), int(edges.max())
        span = (top_n + 1) * (top_e + 1)
        if smallest < 0 or span > _RANK_SPAN:
            return
        self.width = top_e + 1
        present = np.zeros(span, bool)
        for start in range(0, nodes.shape[0], _memory.STEP_WINDOW):
            pair = nodes[start : start + _memory.STEP_WINDOW].astype(np.int64)
            pair *= self.width
            pair += edges[start : start + _memory.STEP_WINDOW]
            present[pair] = True
        self.pairs = np.flatnonzero(present)


class ShareRanks:
    """Sort keys of the graphs' shares ``n / node_cap + e / edge_cap`` (compared exactly, as in
    `step_fill`'s per-step dealing), largest share first: a uint16 rank per distinct ``(n, e)``
    pair (equal shares, equal ranks) looked up in a table, or the negated exact key when the
    pairs are too many."""

    def __init__(
        self,
        nodes: NDArray[np.integer[Any]],
        edges: NDArray[np.integer[Any]],
        node_cap: int,
        edge_cap: int,
        size_pairs: SizePairs | None = None,
    ) -> None:
        self.node_cap, self.edge_cap = max(node_cap, 1), max(edge_cap, 1)
        self.table: NDArray[np.uint16] | None = None
        if size_pairs is None:
            size_pairs = SizePairs(nodes, edges)
        if size_pairs.pairs is None:
            return
        self.width = size_pairs.width
        pairs = size_pairs.pairs
        span = int(pairs[-1]) + 1
        #: largest node and edge counts of the graphs (all counts are >= 0 here)
        self.top_n, self.top_e = (span - 1) // self.width, self.width - 1
        share = share_keys(pairs // self.width, pairs % self.width, self.node_cap, self.edge_cap)
        uniq, inv = np.unique(share, return_inverse=True)  # ascending
        if uniq.shape[0] > 2**16:
            return
        table = np.zeros(span, np.uint16)
        rank = (uniq.shape[0] - 1 - inv.reshape(-1)).astype(np.uint16)
        table[pairs] = rank
        self.table = table
        #: number of ranks (0 .. n_ranks - 1)
        self.n_ranks = int(uniq.shape[0])
        # one pair per rank (no two pairs of equal share): a rank tells the sizes, so graphs of
        # one rank are interchangeable in a batch's totals
        self.rank_nodes: NDArray[np.int64] | None = None
        self.rank_edges: NDArray[np.int64] | None = None
        if uniq.shape[0] == pairs.shape[0]:
            self.rank_nodes = np.zeros(uniq.shape[0], np.int64)
            self.rank_edges = np.zeros(uniq.shape[0], np.int64)
            self.rank_nodes[rank] = pairs // self.width
            self.rank_edges[rank] = pairs % self.width

    def _pair(
        self, nodes: NDArray[np.integer[Any]], edges: NDArray[np.integer[Any]]
    ) -> NDArray[np.int64]:
        return nodes.astype(np.int64) * self.width + edges

    def keys(self, nodes: NDArray[np.integer[Any]], edges: NDArray[np.integer[Any]]) -> np.ndarray:
        """Sort keys (ascending: largest share first) of graphs of sizes ``nodes``/``edges``:
        uint16 ranks from the table, else negated exact share keys."""
        if self.table is not None:
            return self.table[self._pair(nodes, edges)]
        return -sortable(share_keys(nodes, edges, self.node_cap, self.edge_cap))


def deal_block(
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    ends: np.ndarray,
    ranks: int,
    caps: tuple[int, int, int],
    ranker: ShareRanks,
    perm: np.ndarray | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The steps ``pos..ends[0], ends[0]..ends[1], ...`` dealt as `step_fill`'s per-step path
    deals them before any repair, all at once: one stable sort by (step, share descending).
    ``caps``: the ``(node, edge, graph)`` capacities of a batch. Writes the positions in batch
    order, step after step, to ``perm[pos:ends[-1]]`` (unless ``perm`` is ``None``). Returns
    ``(int64 [steps, 3, ranks] totals (graphs, nodes, edges); whether each step's batches fit
    the budget as dealt)``."""
    node_cap, edge_cap, graph_cap = caps
    num_steps = ends.shape[0]
    starts = np.concatenate([[pos], ends[:-1]])
    lens = ends - starts
    rel = starts - pos  # each step's first position within the block
    block_nodes = nodes[pos : int(ends[-1])]
    block_edges = edges[pos : int(ends[-1])]
    step_of = np.repeat(
        np.arange(num_steps, dtype=np.uint16 if num_steps <= 2**16 else np.int64), lens
    )
    keys = ranker.keys(block_nodes, block_edges)
    ranked = keys.dtype == np.uint16  # uint16 share ranks (else exact keys)
    # by step, then share (largest first), stable; place: position in step of each block position
    order, place, sorted_ranks = _sort_block(step_of, keys, lens, rel, ranker, perm is not None)
    del keys
    if place is None:
        place = np.arange(block_nodes.shape[0], dtype=np.int32) - np.repeat(
            rel.astype(np.int32), lens
        )
    # row and snake batch (over the `ranks` batches) of each place in a step, looked up
    longest = int(lens.max())
    places = np.arange(longest, dtype=np.int32)
    row_of = places // ranks
    col = places - row_of * ranks
    batch = np.where(row_of & 1, ranks - 1 - col, col)[place]
    # (step_of[order] == step_of: the sort keeps steps in place)
    batch_key = step_of.astype(np.int32) * ranks + batch
    batch_nodes, batch_edges = _block_totals(
        block_nodes,
        block_edges,
        batch_key,
        order,
        sorted_ranks,
        ranker if ranked else None,
        -(-longest // ranks),
        num_steps * ranks,
    )
    # graphs per batch: `full` rows each; the partial last row fills batches 0..rem-1 (even
    # row) or ranks-rem..ranks-1 (odd row) of the snake
    full, rem = (lens // ranks)[:, None], (lens % ranks)[:, None]
    b = np.arange(ranks)[None, :]
    odd = full % 2 == 1
    batch_graphs = (full + np.where(odd, b >= ranks - rem, b < rem)).reshape(-1)
    fits = (batch_nodes <= node_cap) & (batch_edges <= edge_cap) & (batch_graphs <= graph_cap)
    fits = fits.reshape(num_steps, ranks).all(axis=1)
    totals = np.stack(
        [
            batch_graphs.reshape(num_steps, ranks),
            batch_nodes.reshape(num_steps, ranks),
            batch_edges.reshape(num_steps, ranks),
        ],
        axis=1,
    )
    if perm is None:
        return totals, fits
    # batch-major order within a step: batch b starts after the graphs of batches < b
    extra = np.where(odd, np.maximum(0, b - (ranks - rem)), np.minimum(b, rem))
    first = (rel[:, None] + b * full + extra).reshape(-1)  # block position of each batch
    assert order is not None  # (`_sort_block` returns the order where it is needed)
    perm[pos : int(ends[-1])][first[batch_key] + row_of[place]] = order + pos
    return totals, fits


def _sort_block(
    step_of: NDArray[Any],
    keys: NDArray[Any],
    lens: NDArray[np.int64],
    rel: NDArray[np.int64],
    ranker: ShareRanks,
    need_order: bool,
) -> tuple[
    NDArray[np.int32] | NDArray[np.intp] | None, NDArray[np.int32] | None, NDArray[Any] | None
]:
    """The block's positions stably sorted by (step ``step_of``, share key): ``(order, place,
    sorted_ranks)`` with ``order`` the block positions in that order (``None`` where neither
    the order nor the weights need them), ``place`` each block position's place in its step
    (``None``: not computed) and ``sorted_ranks`` the share rank of each sorted position where
    a rank is one ``(n, e)`` pair (else ``None``). One sort of uint32 items where the fields fit
    `_ITEM_BITS`, else of int64 items, else a lexsort."""
    num_steps, size = lens.shape[0], step_of.shape[0]
    ranked = keys.dtype == np.uint16
    rank_bits = max(1, (ranker.n_ranks - 1).bit_length()) if ranked else 0
    pos_bits = max(1, (int(lens.max()) - 1).bit_length())
    if ranked and max(1, (num_steps - 1).bit_length()) + rank_bits + pos_bits <= _ITEM_BITS:
        return _sort_u32_items(step_of, keys, lens, rel, ranker, rank_bits, pos_bits, need_order)
    if ranked and num_steps < 2**15 and size < 2**31:
        # one sort of distinct int64 items: bits 48.. the step, 32..47 the rank, 0..31 the
        # block position; faster than a lexsort
        items = step_of.astype(np.int64) << 48
        items |= keys.astype(np.int64) << 32
        items |= np.arange(size, dtype=np.int64)
        items.sort()
        return items.astype(np.int32), None, None  # the low 32 bits: the positions
    return np.lexsort((keys, step_of)), None, None


def _sort_u32_items(
    step_of: NDArray[Any],
    keys: NDArray[Any],
    lens: NDArray[np.int64],
    rel: NDArray[np.int64],
    ranker: ShareRanks,
    rank_bits: int,
    pos_bits: int,
    need_order: bool,
) -> tuple[NDArray[np.int32] | None, NDArray[np.int32], NDArray[Any] | None]:
    """`_sort_block` by one sort of distinct uint32 items, the stable order twice as fast as
    int64 items. An item's fields, high to low: the step, the share rank (``rank_bits``), the
    position in the step (``pos_bits``)."""
    size = step_of.shape[0]
    place = np.arange(size, dtype=np.int32) - np.repeat(rel.astype(np.int32), lens)
    items = step_of.astype(np.uint32) << (rank_bits + pos_bits)
    items |= keys.astype(np.uint32) << pos_bits
    items |= place.astype(np.uint32)
    items.sort()
    sorted_ranks = None
    if ranker.rank_nodes is not None:
        sorted_ranks = (items >> pos_bits) & ((1 << rank_bits) - 1)
    order = None  # needed for the order, or for the weights when a rank is not one pair
    if need_order or sorted_ranks is None:
        # block position: the step's first position (arange - place) plus position in step
        order = (items & ((1 << pos_bits) - 1)).astype(np.int32)
        order += np.arange(size, dtype=np.int32)
        order -= place
    return order, place, sorted_ranks


def _block_totals(
    block_nodes: NDArray[np.integer[Any]],
    block_edges: NDArray[np.integer[Any]],
    batch_key: NDArray[np.int32],
    order: NDArray[np.int32] | NDArray[np.intp] | None,
    sorted_ranks: NDArray[Any] | None,
    ranker: ShareRanks | None,
    rows: int,
    n_batches: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Real node and edge totals (int64) of the ``n_batches`` batches of a dealt block
    (``batch_key``: each sorted position's batch), from one weighted count ``n * 2**shift + e``
    where every total is exact in it (below `_EXACT_FLOAT`), else from two counts. ``rows``:
    most graphs a batch holds; ``ranker``: the share ranks where the keys were ranks (their
    bounds are the table's: no scan of the block)."""
    if ranker is not None:
        top_n, top_e, nonneg = ranker.top_n, ranker.top_e, True
    else:
        top_n, top_e = int(block_nodes.max()), int(block_edges.max())
        nonneg = min(int(block_nodes.min()), int(block_edges.min())) >= 0
    shift = max(1, top_e * rows).bit_length()
    if nonneg and (top_n * rows + 1) << shift < _EXACT_FLOAT:
        if sorted_ranks is not None:  # the weights of the ranks, looked up in a small table
            rank_nodes, rank_edges = _rank_sizes(ranker)
            weight = rank_nodes * float(1 << shift)
            weight += rank_edges
            weight = weight[sorted_ranks]
        else:
            assert order is not None  # (sorted positions are computed where ranks are not)
            weight = block_nodes * float(1 << shift)  # in dataset order (contiguous), then a gather
            weight += block_edges
            weight = weight[order]
        both = np.bincount(batch_key, weights=weight, minlength=n_batches)
        del weight
        batch_nodes = (both // (1 << shift)).astype(np.int64)
        return batch_nodes, (both - batch_nodes * float(1 << shift)).astype(np.int64)
    sorted_nodes: NDArray[np.integer[Any]]
    sorted_edges: NDArray[np.integer[Any]]
    if order is None:
        rank_nodes, rank_edges = _rank_sizes(ranker)
        sorted_nodes, sorted_edges = rank_nodes[sorted_ranks], rank_edges[sorted_ranks]
    else:
        sorted_nodes, sorted_edges = block_nodes[order], block_edges[order]
    # (totals below 2**53: exact in float64)
    batch_nodes = np.bincount(batch_key, weights=sorted_nodes, minlength=n_batches).astype(np.int64)
    return batch_nodes, np.bincount(batch_key, weights=sorted_edges, minlength=n_batches).astype(
        np.int64
    )


def _rank_sizes(ranker: ShareRanks | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The node and edge counts of each share rank, where a rank is one ``(n, e)`` pair (the
    case where `_sort_u32_items` returns sorted ranks)."""
    assert ranker is not None and ranker.rank_nodes is not None and ranker.rank_edges is not None
    return ranker.rank_nodes, ranker.rank_edges
