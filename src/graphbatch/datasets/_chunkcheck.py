"""Per-chunk CRC-32 of a graph store's data arrays: the chunk grid and CRC table written with
the store (format 3), and `ChunkChecker`, which checks each chunk the first time a read in
this process touches it.

A store's graphs are cut into *check chunks* of consecutive graphs, ``chunk_graphs[k] :
chunk_graphs[k + 1]``, each holding about `CHUNK_BYTES` of graph data (a graph bigger than
that is a chunk of its own). For every chunk ``k`` and every data array ``a`` (``edge_index``
and each node/edge/graph field, in the header's ``chunks.arrays`` order),
``chunk_crc32[k, a]`` is the CRC-32 of the bytes of that array's rows of those graphs: node
rows ``offsets/node[b0]:offsets/node[b1]``, edge rows ``offsets/edge[b0]:offsets/edge[b1]``,
graph rows ``b0:b1``; for ``edge_index`` ``[2, E]`` row 0's columns, then row 1's, chained.
The grid is aligned to graphs, so a batch finds its chunks with one ``searchsorted`` of its
graph indices, and every array is checked per chunk with one CRC call.

The writer computes the table from the file it has just written (`chunk_crcs` over memory maps
of it), so the table describes what is on disk; the reader runs the same function per chunk.
"""

from __future__ import annotations

import mmap
import threading
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

__all__ = ["CHUNK_BYTES", "ChunkChecker", "chunk_bounds", "chunk_crcs"]

#: Target bytes of graph data per check chunk (all arrays together). A chunk's check costs a
#: CRC-32 of its bytes (~0.15 ms per MiB here) plus one slice and one CRC call per array; on
#: QM9 (12 arrays) a whole first epoch's checks cost 39% of the batch kernel's CPU with 256 KiB
#: chunks, 24% with 1 MiB and 23% with 4 MiB (small per-array slices CRC slower); 1 MiB keeps
#: the first batches' spike small (a batch touching k new chunks pays ~0.15 k ms).
CHUNK_BYTES = 1 << 20


def chunk_bounds(graph_bytes: np.ndarray, target: int = CHUNK_BYTES) -> np.ndarray:
    """int64 ``[K + 1]`` graph boundaries of the check chunks: consecutive graphs of about
    ``target`` bytes each (``graph_bytes``: the data bytes of each graph), from 0 to ``G``,
    strictly increasing (``K = 0`` only for ``G = 0``)."""
    g = int(graph_bytes.shape[0])
    if g == 0:
        return np.zeros(1, dtype=np.int64)
    cum = np.cumsum(graph_bytes.astype(np.int64))
    # chunk j ends after the first graph whose running total reaches (j + 1) * target
    marks = np.arange(1, int(cum[-1]) // target + 1, dtype=np.int64) * target
    ends = np.searchsorted(cum, marks, side="left") + 1
    return np.unique(np.concatenate([[0], ends[ends < g], [g]])).astype(np.int64)


def _flat_bytes(arr: np.ndarray) -> np.ndarray:
    """``arr`` (C-contiguous, e.g. a read-only memory map) as a flat ``uint8`` view."""
    return arr.reshape(-1).view(np.uint8)


class _Column:
    """One data array's byte ranges per chunk: ``level`` node/edge/graph, ``row`` bytes per
    row, ``view`` its flat bytes; ``edge_index`` has two rows of ``E`` entries each."""

    def __init__(self, where: str, arr: np.ndarray, level: str) -> None:
        self.where = where
        self.level = level
        self.edge_index = where == "edge_index"
        if self.edge_index:
            self.row = arr.dtype.itemsize
            self.stride = int(arr.shape[1]) * self.row  # bytes of one of the two rows
        else:
            self.row = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
        self.view = _flat_bytes(arr) if arr.size else np.zeros(0, np.uint8)

    def crc(self, r0: int, r1: int) -> int:
        """CRC-32 of rows ``r0:r1`` (for ``edge_index``: columns, row 0 then row 1)."""
        # (ignores: NumPy declares arrays as buffers to type checkers on Python >= 3.12 only)
        v, b = self.view, self.row
        if self.edge_index:
            crc = zlib.crc32(v[r0 * b : r1 * b])  # type: ignore[arg-type]
            second = v[self.stride + r0 * b : self.stride + r1 * b]
            return zlib.crc32(second, crc)  # type: ignore[arg-type]
        return zlib.crc32(v[r0 * b : r1 * b])  # type: ignore[arg-type]


def _columns(arrays: dict[str, np.ndarray], names: list[str]) -> list[_Column]:
    return [
        _Column(w, arrays[w], "edge" if w == "edge_index" else w.split("/", 1)[0]) for w in names
    ]


def _rows(
    bounds: np.ndarray, node_offsets: np.ndarray, edge_offsets: np.ndarray, k: int
) -> dict[str, tuple[int, int]]:
    b0, b1 = int(bounds[k]), int(bounds[k + 1])
    return {
        "node": (int(node_offsets[b0]), int(node_offsets[b1])),
        "edge": (int(edge_offsets[b0]), int(edge_offsets[b1])),
        "graph": (b0, b1),
    }


def chunk_crcs(
    arrays: dict[str, np.ndarray],
    names: list[str],
    bounds: np.ndarray,
    node_offsets: np.ndarray,
    edge_offsets: np.ndarray,
) -> np.ndarray:
    """uint32 ``[K, A]``: the CRC-32 of every chunk of every array ``names`` (module
    docstring). ``arrays``: the store's arrays by dataset path (memory maps)."""
    cols = _columns(arrays, names)
    out = np.zeros((int(bounds.shape[0]) - 1, len(cols)), dtype=np.uint32)
    for k in range(out.shape[0]):
        rows = _rows(bounds, node_offsets, edge_offsets, k)
        for a, col in enumerate(cols):
            out[k, a] = col.crc(*rows[col.level])
    return out


def _shared_flags(shape: tuple[int, ...]) -> np.ndarray:
    """A zeroed bool array in an anonymous shared memory map: processes forked after it was
    made (DataLoader workers, every epoch's new ones) share it with this one."""
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.zeros(shape, dtype=bool)
    return np.frombuffer(mmap.mmap(-1, n), dtype=np.bool_).reshape(shape)


class ChunkChecker:
    """Checks each check chunk of one open store the first time a read touches it. Raises
    ``error(message)`` naming the file, the array and the chunk.

    Which chunks are checked is kept in an anonymous shared memory map: a process forked from
    this one (a DataLoader worker; non-persistent workers are forked anew every epoch) sees
    what the parent and its siblings checked before and after the fork -- same memory maps,
    same file -- so a training run checks each chunk about once in all. A pickled copy (a
    spawned worker) drops the checker and checks for itself.

    ``check_graphs(index)`` is what every read calls: one ``searchsorted`` and one boolean
    gather over the batch's graph indices while chunks remain unchecked, a single integer test
    once all are (`remaining` is 0). Safe to call from several threads and processes (a chunk
    may be checked twice, never marked checked before it is).
    """

    def __init__(
        self,
        path: Path,
        arrays: dict[str, np.ndarray],
        names: list[str],
        bounds: np.ndarray,
        table: np.ndarray,
        error: Callable[[str], Exception],
    ) -> None:
        self.path = path
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.table = table
        self._cols = _columns(arrays, names)
        self._col = {c.where: a for a, c in enumerate(self._cols)}
        self._no = np.asarray(arrays["offsets/node"])
        self._eo = np.asarray(arrays["offsets/edge"])
        self._error = error
        n = int(self.bounds.shape[0]) - 1
        self.done = _shared_flags((n,))  # every column of chunk k checked
        self._col_done = _shared_flags((n, len(self._cols)))
        self.remaining = n  # in this process's view
        self._lock = threading.Lock()

    @property
    def n_chunks(self) -> int:
        return int(self.done.shape[0])

    def check_graphs(self, index: np.ndarray) -> None:
        """Check every not yet checked chunk holding one of the graphs ``index`` (int64,
        in range)."""
        if not self.remaining or index.shape[0] == 0:
            return
        k = np.searchsorted(self.bounds, index, side="right") - 1
        todo = k[~self.done[k]]
        if todo.shape[0] == 0:
            self._refresh()
        for c in np.unique(todo).tolist():
            self._check_chunk(c)

    def _refresh(self) -> None:
        """Count again what is left: other processes may have checked chunks meanwhile."""
        self.remaining = int(self.done.shape[0] - np.count_nonzero(self.done))

    def check_range(self, start: int, stop: int) -> None:
        """Check the chunks of graphs ``start:stop``."""
        if not self.remaining or stop <= start:
            return
        k0 = int(np.searchsorted(self.bounds, start, side="right")) - 1
        k1 = int(np.searchsorted(self.bounds, stop - 1, side="right")) - 1
        todo = [c for c in range(k0, k1 + 1) if not self.done[c]]
        if not todo:
            self._refresh()
        for c in todo:
            self._check_chunk(c)

    def check_array(self, where: str) -> None:
        """Check array ``where`` in every chunk (a read of the whole array)."""
        if not self.remaining:
            return
        a = self._col[where]
        for c in np.flatnonzero(~self._col_done[:, a]).tolist():
            self._check_chunk(c, (a,))

    def mark_all_checked(self) -> None:
        """Every array was checked whole (`GraphStore.verify`): no chunk needs a check."""
        with self._lock:
            self._col_done[:] = True
            self.done[:] = True
            self.remaining = 0

    def _check_chunk(self, c: int, cols: Iterable[int] | None = None) -> None:
        rows = _rows(self.bounds, self._no, self._eo, c)
        for a in range(len(self._cols)) if cols is None else cols:
            if self._col_done[c, a]:
                continue
            col = self._cols[a]
            if col.crc(*rows[col.level]) != int(self.table[c, a]):
                b0, b1 = rows["graph"]
                raise self._error(
                    f"{str(self.path)!r}: {col.where}, check chunk {c} of {self.n_chunks} "
                    f"(graphs {b0}:{b1}), does not match its CRC-32: damaged data (run "
                    "`graphbatch data verify` on the store)"
                )
            self._col_done[c, a] = True
        with self._lock:
            if not self.done[c] and self._col_done[c].all():
                self.done[c] = True
                self.remaining -= 1
