"""On-disk graph store: contiguous, uncompressed, memory-mapped arrays in an HDF5 file.

File layout (format ``graphbatch-graph-store``, version `STORE_VERSION` = 3; the prefix and the
JSON header are specified in `graphbatch.datasets._header`, the check chunks in
`graphbatch.datasets._chunkcheck`)::

    bytes 0..511      prefix in the HDF5 userblock: magic, version, offset/length/CRC-32 of
                      the JSON header, CRC-32 of the prefix
    /header           uint8 [H]      JSON: format, format_version, uuid, name, meta, n_graph,
                                     n_node_total, n_edge_total, edge_index_dtype, fields,
                                     arrays (offset, shape, dtype, crc32 of every dataset),
                                     chunks (count, target_bytes, table columns)
    /sizes/n_node     int64 [G]      per-graph counts: the planner reads only these
    /sizes/n_edge     int64 [G]
    /offsets/node     int64 [G + 1]  graph g's node rows: offsets/node[g]:offsets/node[g+1]
    /offsets/edge     int64 [G + 1]
    /edge_index       int   [2, E]   local node indices per graph (row 0 = source)
    /node/<field>     [N, ...]       node-level arrays, all graphs back to back
    /edge/<field>     [E, ...]       edge-level arrays
    /graph/<field>    [G, ...]       graph-level arrays (targets ``y``, ids, ...)
    /failed_index     int64 [F]      source records that could not be converted (may be empty)
    /checks/chunk_graphs  int64 [K + 1]   graph boundaries of the check chunks
    /checks/chunk_crc32   uint32 [K, A]   CRC-32 of each data array's bytes per check chunk

Every dataset is stored contiguously without filters, so a reader memory-maps it with NumPy
(``np.memmap`` at the offset the header gives) and a batch is a fancy index into the page
cache -- no HDF5 call, no decompression, nothing copied per DataLoader worker. A reader never
parses HDF5: the prefix and header are read with plain file reads and CRC-checked (HDF5 keeps
format 2's header strings in its unchecksummed global heap, whose parser can loop forever on a
damaged byte). Integrity: the header's CRC and bounds on open; the CRC-32 of the size, offset,
failed and chunk-table arrays on open; each check chunk's CRC-32 the first time a read in the
process touches it (``check_chunks``); every array's CRC-32 in `GraphStore.verify` (or
``graphbatch data verify``, or ``GraphStore(path, verify=True)``). Each store has a random
``uuid`` checked whenever a process re-opens it, so a store replaced on disk is never read with
the old one's offsets. Files are written to a temporary folder and renamed when complete; no
pickled object is ever written or read (metadata is JSON). Format-2 stores (header in HDF5
attributes, `graphbatch.datasets._store_legacy`) open through `graphbatch.datasets._h5probe`,
without chunk checks; format 1 only converts (`graphbatch.datasets.convert_store`).

The parts: this module reads one store file (`GraphStore`); `_store_write` writes one;
`_store_map` opens the file (header, memory maps, the truncation guard); `_store_base` holds
what the single-file and the sharded store (`_shards`) share; `_store_open.open_store` picks
between them for a path.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._errors import EdgeIndexError, StoreFormatError, UnknownNameError
from .._padbatch import PackedGraphs, PaddedArrays, _index, pad_batch
from ._chunkcheck import ChunkChecker
from ._graphs import LEVELS, GraphArrays
from ._header import STORE_VERSION, StoreHeader, streamed_crc32
from ._store_base import StoreBase
from ._store_map import MappedFile, map_store, read_header, warn_unchecked

__all__ = ["GraphStore"]


def _frozen(rows: np.ndarray) -> np.ndarray:
    """A read-only copy of ``rows`` (of a memory map): one graph's arrays outlive the map."""
    out = np.array(rows)
    out.flags.writeable = False
    return out


class GraphStore(StoreBase):
    """Read access to one store file: sizes without graph data, one graph, a padded batch, or
    ranges (a `graphbatch._source.GraphSource`).

    Arrays are memory-mapped (``in_memory=False``, the default: the page cache holds the data,
    shared by every process reading the file, so DataLoader workers add no copy) or read whole
    into RAM once (``in_memory=True``: faster random gathers for stores that fit in RAM --
    NumPy asks for transparent huge pages for large arrays, a file map uses 4 KiB pages;
    forked workers share those pages copy-on-write, pickled copies re-open memory-mapped).
    ``verify=True`` checks every array's checksum on open (reads the whole file once).
    ``check_chunks=True`` (the default) checks the CRC-32 of each check chunk (about 1 MiB
    of consecutive graphs, `graphbatch.datasets._chunkcheck`) the first time a read in this
    process touches it -- `read_batch`, `read_graph`/``get``, `arrays`, `graph_field` -- so a
    damaged array raises `StoreFormatError` naming the file, array and chunk instead of being
    served; `packed` gives the raw maps, unchecked. Format-2 stores have no chunk checksums
    (a `StoreFormatWarning` says so once; `graphbatch data convert` upgrades them).
    ``get``/``[i]`` go through an LRU cache of ``cache_size`` graphs (read-only arrays).

    The store can be pickled to worker processes: the copy re-opens the file by path and
    raises `StoreFormatError` if the file there is no longer the same store (its ``uuid``
    differs). Forked workers keep the parent's memory maps, i.e. the file the parent opened.

    ``path`` is one store file; a sharded store's JSON manifest (written by
    `graphbatch.datasets.build_sharded_store`) raises `StoreFormatError` pointing to
    `graphbatch.datasets.open_store`, which opens either kind.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        cache_size: int = 4096,
        in_memory: bool = False,
        verify: bool = False,
        check_chunks: bool = True,
    ) -> None:
        super().__init__(path, cache_size, in_memory, check_chunks)
        self._maps: dict[str, np.ndarray] | None = None
        self._packed: PackedGraphs | None = None
        self._checker: ChunkChecker | None = None
        self._file: MappedFile | None = None
        header = read_header(self.path)
        self.uuid = header.uuid
        self.header_crc = header.header_crc
        self.format_version = header.format_version
        self.edge_index_dtype = np.dtype(header.edge_dtype)
        if header.format_version < STORE_VERSION and self.check_chunks:
            warn_unchecked(self.path, header.format_version)
        self.name = header.name
        self.fields = header.fields
        self.meta = header.meta
        self._checksums = header.checksums
        self._open(header)
        if verify:
            self.verify()

    # ------------------------------------------------------------ arrays
    def _open(self, header: StoreHeader) -> dict[str, np.ndarray]:
        maps, self._checker, self._file = map_store(
            self.path, header, self.in_memory, self.check_chunks
        )
        self._maps = maps
        return maps

    def _whole(self) -> dict[str, np.ndarray]:
        """`_arrays`, after checking that the file still holds every mapped byte (one
        ``fstat``): what every read of graph data calls before touching a mapped page, which
        past the end of a truncated file would be SIGBUS (`MappedFile`)."""
        maps = self._arrays()
        self.check_intact()
        return maps

    def _arrays(self) -> dict[str, np.ndarray]:
        if self._maps is None:  # a copy in another process: re-open, same store or nothing
            header = read_header(self.path)
            if header.uuid != self.uuid:
                raise StoreFormatError(
                    f"{str(self.path)!r} was replaced since it was opened (store id "
                    f"{self.uuid}, the file now holds {header.uuid}); open it again"
                )
            return self._open(header)
        return self._maps

    def close(self) -> None:
        """Drop the memory maps (they are re-opened, with the identity check, on next use)."""
        self._maps = None
        self._packed = None
        self._checker = None
        if self._file is not None:
            self._file.close()
            self._file = None
        self._cache.clear()

    def __getstate__(self) -> dict:
        """For worker processes: no maps, no cache; a copy always re-opens memory-mapped (also
        from an ``in_memory`` store), so spawned workers never hold a private copy of the data."""
        return self._worker_state(_maps=None, _packed=None, _checker=None, _file=None)

    # ------------------------------------------------------------ metadata
    @property
    def n_node(self) -> np.ndarray:
        return self._arrays()["sizes/n_node"]

    @property
    def n_edge(self) -> np.ndarray:
        return self._arrays()["sizes/n_edge"]

    @property
    def node_offsets(self) -> np.ndarray:
        return self._arrays()["offsets/node"]

    @property
    def edge_offsets(self) -> np.ndarray:
        return self._arrays()["offsets/edge"]

    def __repr__(self) -> str:
        return (
            f"GraphStore({str(self.path)!r}, name={self.name!r}, graphs={len(self)}, "
            f"fields={sorted(self.fields)})"
        )

    @property
    def failed_index(self) -> np.ndarray:
        """Source-record indices that failed conversion when the store was built."""
        return self._arrays()["failed_index"]

    def graph_field(self, name: str) -> np.ndarray:
        """The whole graph-level array ``name`` (e.g. targets ``y`` as ``[G, T]``, read-only)."""
        spec = self.fields.get(name)
        if spec is None or spec["level"] != "graph":
            graph_fields = [k for k, s in self.fields.items() if s["level"] == "graph"]
            raise UnknownNameError(f"no graph-level field {name!r}; available: {graph_fields}")
        arr = self._whole()[f"graph/{name}"]
        if self._checker is not None:
            self._checker.check_array(f"graph/{name}")
        return arr

    # ------------------------------------------------------------ graph data
    def packed(self) -> PackedGraphs:
        """All graphs as `graphbatch._padbatch.PackedGraphs` over the memory maps (plain
        ``ndarray`` views of them: nothing is read until rows are gathered; the file's size is
        checked now, not at those reads)."""
        self._whole()
        return self._packed_maps()

    def _packed_maps(self) -> PackedGraphs:
        if self._packed is None or self._maps is None:
            maps = {k: np.asarray(v) for k, v in self._arrays().items()}
            per_level: dict[str, dict[str, np.ndarray]] = {level: {} for level in LEVELS}
            for name, spec in self.fields.items():
                per_level[spec["level"]][name] = maps[f"{spec['level']}/{name}"]
            self._packed = PackedGraphs(
                n_node=maps["sizes/n_node"],
                n_edge=maps["sizes/n_edge"],
                node_offsets=maps["offsets/node"],
                edge_offsets=maps["offsets/edge"],
                edge_index=maps["edge_index"],
                **per_level,
            )
        return self._packed

    def read_batch(self, index: Any, shape: Any, **options: Any) -> PaddedArrays:
        """Graphs ``index`` as one padded batch of ``shape`` (`graphbatch._padbatch.pad_batch`,
        whose keyword ``options`` pass through); a damaged edge index raises
        `StoreFormatError`, and so does a damaged check chunk (``check_chunks``) or a file
        truncated since it was opened."""
        self._whole()
        packed = self._packed_maps()
        checker = self._checker
        if checker is not None and checker.remaining:
            index = _index(index, len(packed))
            checker.check_graphs(index)
        try:
            return pad_batch(packed, index, shape, **options)
        except EdgeIndexError as exc:  # `_padkernel.check_local_edge_index`
            raise StoreFormatError(f"{str(self.path)!r}: {exc}") from exc

    def read_graph(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` (no LRU cache): ``{"edge_index": [2, E], field: array}`` as read-only
        arrays (copies: they stay valid whatever happens to the file); graph-level fields keep a
        leading dimension of 1. The edge indices are range-checked (`StoreFormatError` if one
        points outside the graph)."""
        i = self._index(i)
        maps = self._whole()
        if self._checker is not None:
            self._checker.check_range(i, i + 1)
        no, eo = maps["offsets/node"], maps["offsets/edge"]
        rows = {
            "node": slice(no[i], no[i + 1]),
            "edge": slice(eo[i], eo[i + 1]),
            "graph": slice(i, i + 1),
        }
        ei = maps["edge_index"][:, rows["edge"]]
        n = int(no[i + 1] - no[i])
        if ei.size and (int(ei.min()) < 0 or int(ei.max()) >= n):
            raise StoreFormatError(
                f"{str(self.path)!r}: stored edge_index of graph {i} points "
                f"outside its {n} nodes (damaged store?)"
            )
        out = {"edge_index": _frozen(ei)}
        for name, spec in self.fields.items():
            out[name] = _frozen(maps[f"{spec['level']}/{name}"][rows[spec["level"]]])
        return out

    def arrays(self, start: int = 0, stop: int | None = None) -> GraphArrays:
        """Graphs ``start:stop`` as one `GraphArrays` (copies; edge indices are checked)."""
        start, stop = self._range(start, stop)
        maps = self._whole()
        if self._checker is not None:
            self._checker.check_range(start, stop)
        no, eo = maps["offsets/node"], maps["offsets/edge"]
        rows = {
            "node": slice(no[start], no[stop]),
            "edge": slice(eo[start], eo[stop]),
            "graph": slice(start, stop),
        }
        per_level: dict[str, dict[str, np.ndarray]] = {level: {} for level in LEVELS}
        for name, spec in self.fields.items():
            per_level[spec["level"]][name] = np.array(
                maps[f"{spec['level']}/{name}"][rows[spec["level"]]]
            )
        try:
            return GraphArrays(
                n_node=np.array(self.n_node[start:stop]),
                n_edge=np.array(self.n_edge[start:stop]),
                edge_index=np.array(maps["edge_index"][:, rows["edge"]]),
                **per_level,
            )
        except ValueError as exc:
            raise StoreFormatError(
                f"{str(self.path)!r}: graphs {start}:{stop} are damaged: {exc}"
            ) from exc

    def verify(self) -> None:
        """Check the CRC-32 of every array (reads the whole file once); raises
        `StoreFormatError` naming the first damaged array."""
        for where, arr in self._whole().items():
            if streamed_crc32(arr) != self._checksums[where]:
                raise StoreFormatError(
                    f"{str(self.path)!r}: checksum of {where} does not match (damaged data)"
                )
        if self._checker is not None:  # every byte is checked now: no chunk needs it again
            self._checker.mark_all_checked()

    def check_intact(self) -> None:
        """Raise `StoreFormatError` naming the file if it is shorter now than the arrays this
        object mapped (truncated while open); nothing when no maps are open. The check every
        read of graph data makes first (one ``fstat``). A process killed by SIGBUS while it
        read a page the truncation removed (a DataLoader worker, in the instant between this
        check and the read) is explained with it by `graphbatch.torch.PlanLoader`."""
        if self._file is not None:
            self._file.check()
