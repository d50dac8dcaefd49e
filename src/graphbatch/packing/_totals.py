"""Per-batch and per-pack sums, and the oversize test, chunk by chunk (int64 results, no
int64 copy of a narrow per-graph array)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._budget import Budget
from . import _memory

__all__ = ["any_oversize", "batch_totals", "pack_totals"]


def any_oversize(nodes: np.ndarray, edges: np.ndarray, budget: Budget) -> bool:
    """Whether any graph has more nodes or edges than ``budget`` holds, tested chunk by chunk
    (no boolean array of every graph)."""
    step = _memory.OVERSIZE_CHUNK
    return any(
        bool(
            (
                (nodes[s0 : s0 + step] > budget.node_capacity)
                | (edges[s0 : s0 + step] > budget.edge_capacity)
            ).any()
        )
        for s0 in range(0, nodes.shape[0], step)
    )


def batch_totals(
    values: np.ndarray, offsets: np.ndarray, table: np.ndarray | None = None
) -> np.ndarray:
    """Per-batch sums of ``values`` (already in plan order) for batch boundaries ``offsets``,
    int64. Summed in chunks of about `TOTALS_CHUNK` values: ``np.add.reduceat`` with an int64
    accumulator casts its whole input first, so narrow values are cast chunk by chunk. With
    ``table``, the sums of ``table[values]`` (looked up chunk by chunk: no gathered array)."""
    nb = offsets.shape[0] - 1
    out = np.zeros(nb, dtype=np.int64)
    if nb == 0 or values.shape[0] == 0:
        return out
    if table is not None:
        table = np.asarray(table).astype(np.int64, copy=False)
    b0 = 0
    while b0 < nb:
        lo = int(offsets[b0])
        b1 = int(np.searchsorted(offsets, lo + _memory.TOTALS_CHUNK, "right")) - 1
        b1 = min(nb, max(b1, b0 + 1))
        starts = offsets[b0:b1] - lo
        chunk = values[lo : int(offsets[b1])]
        chunk = chunk.astype(np.int64, copy=False) if table is None else table[chunk]
        nonempty = offsets[b0 + 1 : b1 + 1] > offsets[b0:b1]
        if chunk.shape[0]:
            if nonempty.all():
                np.add.reduceat(chunk, starts, out=out[b0:b1])
            else:
                out[b0:b1][nonempty] = np.add.reduceat(chunk, starts[nonempty])
        b0 = b1
    return out


def pack_totals(
    slot_bin: np.ndarray, offsets: np.ndarray, bin_nodes: ArrayLike, bin_edges: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-pack real ``(nodes, edges, graphs)`` of packs as slots, int64. One lookup and one sum
    per chunk of slots (`batch_totals` with a table): each bin's node count in the high 32 bits
    and its edge count in the low ones, where every pack's totals fit their halves (sums then
    never carry from one half to the other); else the two columns apart."""
    starts = offsets[:-1]
    if starts.size == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    node_table = np.asarray(bin_nodes).astype(np.int64, copy=False)
    edge_table = np.asarray(bin_edges).astype(np.int64, copy=False)
    width = int(np.diff(offsets).max())
    if (
        node_table.size
        and int(node_table.min()) >= 0
        and int(edge_table.min()) >= 0
        and width * int(node_table.max()) < 2**31
        and width * int(edge_table.max()) < 2**32
    ):
        both = batch_totals(slot_bin, offsets, table=(node_table << 32) | edge_table)
        return both >> 32, both & 0xFFFFFFFF, np.diff(offsets)
    return (
        batch_totals(slot_bin, offsets, table=node_table),
        batch_totals(slot_bin, offsets, table=edge_table),
        np.diff(offsets),
    )
