"""`PackPatterns`: the result of histogram packing, packs as multisets of size bins."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from . import _memory

__all__ = ["PackPatterns", "patterns_from_slots"]


@dataclass(frozen=True)
class PackPatterns:
    """Packs described by size patterns over the bins of a histogram.

    Pattern ``t`` holds ``copies[k]`` graphs of bin ``bins[k]`` for ``k`` in
    ``offsets[t]:offsets[t+1]`` and is used by ``count[t]`` packs. ``nodes``, ``edges`` and
    ``graphs`` are each pattern's real totals. Every bin's graphs are covered exactly:
    ``sum over patterns of count * copies`` equals the histogram count of that bin.
    """

    bins: np.ndarray
    copies: np.ndarray
    offsets: np.ndarray
    count: np.ndarray
    nodes: np.ndarray
    edges: np.ndarray
    graphs: np.ndarray

    @classmethod
    def build(
        cls,
        bins: ArrayLike,
        copies: ArrayLike,
        offsets: ArrayLike,
        count: ArrayLike,
        bin_nodes: np.ndarray,
        bin_edges: np.ndarray,
    ) -> PackPatterns:
        bins = np.asarray(bins, dtype=np.int64)
        copies = np.asarray(copies, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        count = np.asarray(count, dtype=np.int64)
        keep = count > 0
        if not keep.all():  # drop unused patterns
            lens = np.diff(offsets)
            entry_keep = np.repeat(keep, lens)
            bins, copies = bins[entry_keep], copies[entry_keep]
            offsets = np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
            count = count[keep]
        t = count.shape[0]
        pat = np.repeat(np.arange(t), np.diff(offsets))
        nodes = np.bincount(pat, weights=copies * bin_nodes[bins], minlength=t)
        edges = np.bincount(pat, weights=copies * bin_edges[bins], minlength=t)
        graphs = np.bincount(pat, weights=copies, minlength=t)
        return cls(
            bins,
            copies,
            offsets,
            count,
            nodes.astype(np.int64),
            edges.astype(np.int64),
            graphs.astype(np.int64),
        )

    @property
    def num_patterns(self) -> int:
        return int(self.count.shape[0])

    @property
    def num_packs(self) -> int:
        return int(self.count.sum())

    def bin_counts(self, num_bins: int) -> np.ndarray:
        """Graphs of each bin placed by the patterns (equals the histogram counts)."""
        pat = np.repeat(np.arange(self.num_patterns), np.diff(self.offsets))
        return np.bincount(
            self.bins, weights=self.copies * self.count[pat], minlength=num_bins
        ).astype(np.int64)

    def pack_totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-pack ``(nodes, edges, graphs)``, packs in pattern order."""
        return (
            np.repeat(self.nodes, self.count),
            np.repeat(self.edges, self.count),
            np.repeat(self.graphs, self.count),
        )

    def slots(self) -> tuple[np.ndarray, np.ndarray]:
        """``(slot_bin, pack_offsets)``: the bin of every graph slot, packs in pattern order.

        ``slot_bin`` has the narrowest dtype holding the bins (int16/int32/int64) and is built
        in chunks of about `PATTERN_SLOTS` slots (no per-slot int64 temporaries); offsets are
        int64."""
        top = int(self.bins.max(initial=0)) + 1
        dt = np.int16 if top <= 2**15 else (np.int32 if top <= 2**31 else np.int64)
        items = np.repeat(self.bins, self.copies).astype(dt)  # items of each pattern
        item_off = np.concatenate([[0], np.cumsum(self.graphs)]).astype(np.int64)
        pack_pat = np.repeat(np.arange(self.num_patterns), self.count)
        sizes = self.graphs[pack_pat]
        pack_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        slot_bin = np.empty(int(pack_offsets[-1]), dt)
        q0, num = 0, pack_pat.shape[0]
        chunk = _memory.PATTERN_SLOTS
        while q0 < num:  # chunks of whole packs
            q1 = int(np.searchsorted(pack_offsets, pack_offsets[q0] + chunk, "right")) - 1
            q1 = min(num, max(q1, q0 + 1))
            lo, hi = int(pack_offsets[q0]), int(pack_offsets[q1])
            sz = sizes[q0:q1]
            within = np.arange(hi - lo, dtype=np.int64) - np.repeat(pack_offsets[q0:q1] - lo, sz)
            slot_bin[lo:hi] = items[np.repeat(item_off[pack_pat[q0:q1]], sz) + within]
            q0 = q1
        return slot_bin, pack_offsets


def patterns_from_slots(
    slot_bin: ArrayLike, pack_offsets: ArrayLike, bin_nodes: np.ndarray, bin_edges: np.ndarray
) -> PackPatterns:
    """One pattern per pack from per-slot bins (slots of a pack need not be sorted)."""
    slot_bin = np.asarray(slot_bin, dtype=np.int64)
    pack_offsets = np.asarray(pack_offsets, dtype=np.int64)
    num_packs = pack_offsets.shape[0] - 1
    pack_of = np.repeat(np.arange(num_packs), np.diff(pack_offsets))
    nb = int(bin_nodes.shape[0])
    key = pack_of * nb + slot_bin
    uniq, copies = np.unique(key, return_counts=True)
    pack = uniq // nb
    bins = uniq % nb
    lens = np.bincount(pack, minlength=num_packs)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return PackPatterns.build(
        bins, copies, offsets, np.ones(num_packs, dtype=np.int64), bin_nodes, bin_edges
    )
