"""`PackedSizes`: a size table's node and edge counts packed into one int32 per graph, so that
gathers and shuffles in random order read one array, not two (planning at scale)."""

from __future__ import annotations

import sys

import numpy as np
from numpy.typing import NDArray

from .._errors import InputError
from . import _memory
from ._memory import gather_counts

__all__ = ["PackedSizes"]

#: Whether int64 items are little-endian (their halves are read through views), else shifts.
_LITTLE = sys.byteorder == "little"


class PackedSizes:
    """The size table's node and edge counts packed into one int32 per graph (``n << 16 | e``)
    when every node count is below 2**15 and every edge count below 2**16, so that a gather in
    a random order reads one array, not two (`gather`). ``packed`` is ``None`` otherwise."""

    #: dtype of the unpacked edge counts (set where ``packed`` is)
    edge_dtype: type[np.int16] | type[np.int32]

    def __init__(self, n_node: np.ndarray, n_edge: np.ndarray) -> None:
        self.n_node, self.n_edge = n_node, n_edge
        self.packed: NDArray[np.int32] | None = None
        n = n_node.shape[0]
        if (
            n
            and int(n_node.min()) >= 0
            and int(n_edge.min()) >= 0
            and int(n_node.max()) < 2**15
            and int(n_edge.max()) < 2**16
        ):
            self.packed = np.empty(n, np.int32)
            self.edge_dtype = np.int16 if int(n_edge.max()) < 2**15 else np.int32
            step = _memory.GATHER_CHUNK
            for s0 in range(0, n, step):
                self.packed[s0 : s0 + step] = (n_node[s0 : s0 + step] << 16) | n_edge[
                    s0 : s0 + step
                ]

    def _unpack(self, values: np.ndarray, s0: int, nodes: np.ndarray, edges: np.ndarray) -> None:
        nodes[s0 : s0 + values.shape[0]] = (values >> 16) & 0x7FFF
        edges[s0 : s0 + values.shape[0]] = values & 0xFFFF

    def shuffled(
        self,
        rng: np.random.Generator,
        subset: np.ndarray | None = None,
        *,
        with_order: bool = False,
        out: np.ndarray | None = None,
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """Sizes in a shuffled order without a gather in random order: ``(order, nodes,
        edges)`` equal to ``perm = arange(k); rng.shuffle(perm); order = perm`` (or
        ``subset[perm]`` for ascending graph indices ``subset`` of ``k`` graphs) and
        ``gather(order)`` — the same draws, as numpy's shuffle swaps the same positions
        whatever the items. Each graph's packed sizes (and, with ``with_order``, its index in
        the high 32 bits) travel through the shuffle as one int64; ``order`` is ``None``
        without ``with_order``, else int32. On little-endian machines the three are strided
        views of those items (nodes int16, edges int16 or uint16 from 2**15 on: 8 bytes a graph
        in all, the memory the unpacked arrays would take, with no fresh pages to fault in);
        elsewhere unpacked arrays of `gather`'s dtypes. Needs ``packed`` and fewer than 2**31
        graphs. ``out``: a C-contiguous int64 array of the ``k`` items to shuffle in (its
        contents are overwritten; memory already mapped is not faulted in again)."""
        if self.packed is None or self.packed.shape[0] >= 2**31:
            raise InputError(
                "PackedSizes.shuffled needs packed sizes (below 2**15 nodes and "
                "2**16 edges a graph) of fewer than 2**31 graphs"
            )
        k = self.packed.shape[0] if subset is None else subset.shape[0]
        step = _memory.SHUFFLE_CHUNK  # cache-sized chunks
        if out is None:
            buf = np.empty(k, np.int64)  # int64 items: numpy's fastest shuffle, same draws
        elif out.dtype != np.int64 or out.shape != (k,) or not out.flags.c_contiguous:
            raise InputError(
                f"out must be a C-contiguous int64 array of {k} items, got "
                f"{out.dtype} of shape {out.shape}"
            )
        else:
            buf = out
        # little-endian int64 item: int32 halves [0] packed sizes, [1] graph index; the
        # packed half's int16 halves [0] edges, [1] nodes (below 2**15: no sign bit)
        little = _LITTLE
        halves = buf.view(np.int32).reshape(k, 2)
        for s0 in range(0, k, step):
            s1 = min(k, s0 + step)
            idx = (
                np.arange(s0, s1, dtype=np.int32)
                if subset is None
                else subset[s0:s1].astype(np.int32)
            )
            v = self.packed[s0:s1] if subset is None else self.packed[idx]
            if little:
                halves[s0:s1, 0] = v
                halves[s0:s1, 1] = idx if with_order else 0
            else:
                buf[s0:s1] = (idx.astype(np.int64) << 32) | v if with_order else v
        rng.shuffle(buf)
        if little:  # views of the shuffled items: no fresh arrays to fill
            edge_view = np.int16 if self.edge_dtype == np.int16 else np.uint16
            return (
                halves[:, 1] if with_order else None,
                buf.view(np.int16).reshape(k, 4)[:, 1],
                buf.view(edge_view).reshape(k, 4)[:, 0],
            )
        nodes, edges = np.empty(k, np.int16), np.empty(k, self.edge_dtype)
        order = np.empty(k, np.int32) if with_order else None
        for s0 in range(0, k, step):
            self._unpack(buf[s0 : s0 + step], s0, nodes, edges)
            if order is not None:  # (with_order)
                order[s0 : s0 + step] = buf[s0 : s0 + step] >> 32
        return order, nodes, edges

    def gather(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(gather_counts(n_node, index), gather_counts(n_edge, index))``."""
        if self.packed is None:
            return gather_counts(self.n_node, index), gather_counts(self.n_edge, index)
        m = index.shape[0]
        nodes, edges = np.empty(m, np.int16), np.empty(m, self.edge_dtype)
        step = _memory.GATHER_CHUNK
        for s0 in range(0, m, step):
            self._unpack(self.packed[index[s0 : s0 + step]], s0, nodes, edges)
        return nodes, edges
