"""`repair_overflow`: one-for-one swaps between packs until every pack fits its limits.

Packs are slots (pack ``p`` holds graphs of bins ``slot_bin[offsets[p]:offsets[p+1]]``, bins of a
(nodes, edges) histogram). A balanced partition into exactly the lower bound of packs (the ``kk``
candidate of ``pack-lpf``'s tight-shape step) often overflows a limit by a few edges in a few
packs although the totals fit; swapping one graph of an overflowing pack for a slightly smaller
one of a pack with room fixes that without changing any pack's graph count.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._exact import share_keys, top_indices

__all__ = ["repair_overflow"]

#: Candidate (bin of the overflowing pack, bin of a partner) pairs evaluated per swap at most.
_PAIRS_PER_STEP = 1 << 20
#: Most swaps one repair makes (each fixes at most one overflowing pack): bounds the work.
MAX_STEPS = 512


def _loads(
    slot_bin: np.ndarray,
    offsets: NDArray[np.int64],
    bin_nodes: NDArray[np.int64],
    bin_edges: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Real ``[nodes, edges]`` totals per pack, int64 ``[P, 2]`` (empty packs hold 0)."""
    p = offsets.shape[0] - 1
    out = np.zeros((p, 2), np.int64)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    if nonempty.size:
        starts = offsets[:-1][nonempty]
        out[nonempty, 0] = np.add.reduceat(bin_nodes[slot_bin], starts, dtype=np.int64)
        out[nonempty, 1] = np.add.reduceat(bin_edges[slot_bin], starts, dtype=np.int64)
    return out


class _Repair:
    """State of one repair: slots, per-pack loads, limits and the ceiling (see
    `repair_overflow`). Loads relative to the limits are compared exactly: ``x / lim_n + y /
    lim_e`` as the integer ``x * lim_e + y * lim_n`` (`share_keys`)."""

    def __init__(
        self,
        slot_bin: np.ndarray,
        offsets: NDArray[np.int64],
        bin_nodes: NDArray[np.int64],
        bin_edges: NDArray[np.int64],
        lim: NDArray[np.int64],
        ceiling: np.ndarray,
    ) -> None:
        self.slot_bin, self.offsets, self.bin_nodes, self.bin_edges = (
            slot_bin,
            offsets,
            bin_nodes,
            bin_edges,
        )
        self.lim, self.ceiling = lim, ceiling
        self.loads = _loads(slot_bin, offsets, bin_nodes, bin_edges)
        self.nbins = int(bin_nodes.shape[0])

    def _share(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return share_keys(x, y, int(self.lim[0]), int(self.lim[1]))

    def excess(self, loads: NDArray[np.int64]) -> np.ndarray:
        """Overflow over the limits, relative to them, summed over nodes and edges (exact
        integer keys, 0 where a pack fits)."""
        over = np.maximum(loads - self.lim, 0)
        return self._share(over[..., 0], over[..., 1])

    def partners(self, h: int, k: int) -> np.ndarray:
        """The ``k`` in-limit packs with the most room under the ceiling where pack ``h``
        overflows (all of them when fewer), most room first, ties by pack index."""
        fits = np.asarray((self.loads <= self.lim).all(axis=1))  # (a fresh array)
        fits[h] = False
        cand = np.flatnonzero(fits)
        dims = self.loads[h] > self.lim
        if cand.size > k:
            room = self.ceiling - self.loads[cand]
            room = self._share(room[:, 0] * dims[0], room[:, 1] * dims[1])
            cand = cand[top_indices(room, k)]
        return cand

    def best_swap(self, h: int, cand: np.ndarray) -> tuple[int, int, int, NDArray[np.int64]] | None:
        """``(slot in h, slot in a partner, partner, [move_n, move_e] moved out of h)`` of the
        best swap that lowers ``h``'s overflow and keeps the partner within the limits, or
        ``None``."""
        slot_bin, offsets, bin_nodes, bin_edges, lim = (
            self.slot_bin,
            self.offsets,
            self.bin_nodes,
            self.bin_edges,
            self.lim,
        )
        h_slots = np.arange(offsets[h], offsets[h + 1])
        heavy_bins, h_first = np.unique(slot_bin[h_slots], return_index=True)
        sizes = offsets[cand + 1] - offsets[cand]
        keep = np.cumsum(sizes) <= max(1, _PAIRS_PER_STEP // max(heavy_bins.shape[0], 1))
        keep[0] = True
        cand, sizes = cand[keep], sizes[keep]
        p_slots = np.concatenate([np.arange(offsets[c], offsets[c + 1]) for c in cand])
        owner = np.repeat(np.arange(cand.shape[0]), sizes)
        _, first = np.unique(owner * self.nbins + slot_bin[p_slots], return_index=True)
        p_slots, owner = p_slots[first], owner[first]
        partner_bins = slot_bin[p_slots]
        # moved out of h (bin heavy_bins[i] for bin partner_bins[j])
        move_n = bin_nodes[heavy_bins][:, None] - bin_nodes[partner_bins][None, :]
        move_e = bin_edges[heavy_bins][:, None] - bin_edges[partner_bins][None, :]
        partner_loads = self.loads[cand[owner]]
        part_n, part_e = partner_loads[None, :, 0] + move_n, partner_loads[None, :, 1] + move_e
        new_n, new_e = self.loads[h, 0] - move_n, self.loads[h, 1] - move_e
        left = self._share(np.maximum(new_n - lim[0], 0), np.maximum(new_e - lim[1], 0))
        ok = (part_n <= lim[0]) & (part_e <= lim[1]) & (left < self.excess(self.loads[h]))
        if not ok.any():
            return None
        c_n, c_e = self.ceiling[0], self.ceiling[1]
        above = self._share(
            np.maximum(new_n - c_n, 0) + np.maximum(part_n - c_n, 0),
            np.maximum(new_e - c_e, 0) + np.maximum(part_e - c_e, 0),
        )
        # order: overflow removed, then least growth past the ceiling, then least overflow left
        rank = np.where(ok, (left > 0).astype(np.int64), 2).ravel()
        flat = np.flatnonzero(rank == rank.min())
        growth = above.ravel()[flat]
        flat = flat[growth == growth.min()]
        i, j = divmod(int(flat[np.argmin(left.ravel()[flat])]), partner_bins.shape[0])
        return (
            int(h_slots[h_first[i]]),
            int(p_slots[j]),
            int(cand[owner[j]]),
            np.array([move_n[i, j], move_e[i, j]], np.int64),
        )


def repair_overflow(
    slot_bin: ArrayLike,
    offsets: ArrayLike,
    bin_nodes: ArrayLike,
    bin_edges: ArrayLike,
    node_limit: int,
    edge_limit: int,
    *,
    partners: int = 4,
    max_steps: int = MAX_STEPS,
) -> np.ndarray | None:
    """Swap graphs between packs until every pack holds ``<= node_limit`` real nodes and
    ``<= edge_limit`` real edges; ``None`` when the bounded search does not get there.

    Each step takes the pack with the largest overflow (relative to the limits) and, among the
    ``partners`` in-limit packs with the most room in its overflowing dimensions (8 times as many
    when those offer no swap), makes one swap (one of its graphs for one graph of a partner)
    that lowers its overflow and keeps the partner within the limits: a swap that removes the
    overflow first, then the one that grows the two packs least past the *ceiling* (the largest
    in-limit load of each dimension before the repair, so that the tight shape of the packs that
    already fit grows only when it must), then the one leaving the least overflow.

    Pack graph counts and the multiset of bins never change; the result is a new array
    (``slot_bin`` itself untouched). At most ``min(max_steps, 2 x overflowing packs + 16)``
    swaps; a swap fixes at most one pack, so the search gives up once more packs overflow than
    swaps are left. Each step costs ``O(P)`` plus ``O(distinct bins
    of the pack x distinct bins of its partners)``, at most ``_PAIRS_PER_STEP`` pairs.
    """
    slot_bin = np.asarray(slot_bin)
    offsets = np.asarray(offsets, np.int64)
    node_counts = np.asarray(bin_nodes, np.int64)
    edge_counts = np.asarray(bin_edges, np.int64)
    lim = np.array([int(node_limit), int(edge_limit)], np.int64)
    loads = _loads(slot_bin, offsets, node_counts, edge_counts)
    over = (loads > lim).any(axis=1)
    n_over = int(over.sum())
    if n_over == 0:
        return slot_bin.copy()
    if n_over > max_steps or (loads.sum(axis=0) > lim * loads.shape[0]).any():
        return None  # beyond the step bound, or the totals do not fit: no swap can help
    ceiling = np.array([loads[loads[:, d] <= lim[d], d].max(initial=0) for d in range(2)])
    ceiling = np.where((loads <= lim).any(axis=0), ceiling, lim)
    state = _Repair(slot_bin.copy(), offsets, node_counts, edge_counts, lim, ceiling)
    steps = min(int(max_steps), 2 * n_over + 16)
    for step in range(steps):
        excess = state.excess(state.loads)
        h = int(np.argmax(excess))
        if excess[h] == 0:
            return state.slot_bin
        if int((excess > 0).sum()) > steps - step:
            return None  # more overflowing packs than swaps left
        swap = None
        for k in (partners, 8 * partners):
            cand = state.partners(h, k)
            if cand.size:
                swap = state.best_swap(h, cand)
            if swap is not None or cand.size < k:
                break
        if swap is None:
            return None
        a, b, p, moved = swap
        state.slot_bin[a], state.slot_bin[b] = state.slot_bin[b], state.slot_bin[a]
        state.loads[h] -= moved
        state.loads[p] += moved
    return state.slot_bin if not (state.loads > lim).any() else None
