"""On-disk graph store (HDF5 via h5py): concatenated, chunked, compressed arrays with offsets.

File layout (format ``graphbatch-graph-store``, version `STORE_VERSION`)::

    /                 attrs: format, format_version, name, n_graph, fields (JSON), meta (JSON)
    /sizes/n_node     int64 [G]      per-graph counts: the planner reads only these
    /sizes/n_edge     int64 [G]
    /offsets/node     int64 [G + 1]  graph g's node rows: offsets/node[g]:offsets/node[g+1]
    /offsets/edge     int64 [G + 1]
    /edge_index       int   [2, E]   local node indices per graph (row 0 = source)
    /node/<field>     [N, ...]       node-level arrays, all graphs back to back
    /edge/<field>     [E, ...]       edge-level arrays
    /graph/<field>    [G, ...]       graph-level arrays (targets ``y``, ids, ...)
    /failed_index     int64 [F]      source records that could not be converted (may be empty)

Every array is chunked, compressed and carries HDF5 Fletcher-32 checksums, so a damaged chunk is
reported on read instead of returning garbage. Files are written to a temporary name and renamed
when complete; no pickled object is ever written or read (metadata is JSON).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from .._sizes import GraphSizes
from .._validate import as_nonnegative_int, as_positive_int
from ._graphs import LEVELS, GraphArrays

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "GraphStore",
    "GraphStoreWriter",
    "StoreFormatError",
    "write_store",
]

STORE_FORMAT = "graphbatch-graph-store"
STORE_VERSION = 1


class StoreFormatError(ValueError):
    """The file is not a readable graph store: truncated, corrupted, or another format/version."""


def _h5py():
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - h5py is in the data extra
        raise ImportError("the graph store needs h5py: pip install 'graphbatch[data]'") from exc
    return h5py


def _torch_nbytes(dtype: np.dtype) -> int:
    """Bytes per element once materialised as a torch tensor (int64 / float32 / bool)."""
    kind = np.dtype(dtype).kind
    return 1 if kind == "b" else 8 if kind in "iu" else 4


# ====================================================================== writing
class GraphStoreWriter:
    """Append `GraphArrays` chunks to a new store; `commit` renames the finished file into place.

    Use as a context manager: leaving the block normally commits, an exception discards the
    temporary file and leaves any existing ``path`` untouched.
    """

    def __init__(self, path: str | os.PathLike, *, name: str, meta: dict | None = None,
                 compression: str | None = "gzip", compression_level: int = 4,
                 chunk_rows: int = 4096) -> None:
        h5py = _h5py()
        self.path = Path(path)
        self.name = str(name)
        self.meta = dict(meta or {})
        json.dumps(self.meta)  # fail early on metadata that JSON cannot hold
        if compression not in (None, "gzip", "lzf"):
            raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
        self._filters = {"compression": compression, "shuffle": compression is not None,
                         "fletcher32": True}
        if compression == "gzip":
            self._filters["compression_opts"] = int(compression_level)
        self.chunk_rows = as_positive_int(chunk_rows, "chunk_rows")
        directory = self.path.parent if str(self.path.parent) else Path(".")
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        os.close(fd)
        self._tmp = Path(tmp)
        self._file = h5py.File(self._tmp, "w")
        self._fields: dict[str, dict] | None = None
        self._n_node: list[np.ndarray] = []
        self._n_edge: list[np.ndarray] = []
        self._failed: list[np.ndarray] = []
        self._done = False

    # ------------------------------------------------------------ helpers
    def _create(self, where: str, arr: np.ndarray, axis: int = 0) -> None:
        shape = list(arr.shape)
        shape[axis] = 0
        maxshape = list(arr.shape)
        maxshape[axis] = None
        chunks = list(arr.shape)
        chunks[axis] = self.chunk_rows
        chunks = [max(1, c) for c in chunks]
        self._file.create_dataset(where, shape=tuple(shape), maxshape=tuple(maxshape),
                                  dtype=arr.dtype, chunks=tuple(chunks), **self._filters)

    def _extend(self, where: str, arr: np.ndarray, axis: int = 0) -> None:
        ds = self._file[where]
        n0 = ds.shape[axis]
        n = arr.shape[axis]
        if n == 0:
            return
        ds.resize(n0 + n, axis=axis)
        index = [slice(None)] * arr.ndim
        index[axis] = slice(n0, n0 + n)
        ds[tuple(index)] = arr

    # ------------------------------------------------------------ public
    def append(self, graphs: GraphArrays) -> None:
        """Add ``graphs`` after those already written (same fields, dtypes, trailing shapes)."""
        if self._done:
            raise ValueError("this writer is already committed or closed")
        if not isinstance(graphs, GraphArrays):
            raise TypeError(f"append needs a GraphArrays, got {type(graphs).__name__}")
        fields = {name: {"level": level, "dtype": getattr(graphs, level)[name].dtype.str,
                         "shape": list(getattr(graphs, level)[name].shape[1:])}
                  for name, level in graphs.fields().items()}
        if self._fields is None:
            self._fields = fields
            self._edge_dtype = graphs.edge_index.dtype
            self._create("edge_index", graphs.edge_index, axis=1)
            for name, spec in fields.items():
                self._create(f"{spec['level']}/{name}", getattr(graphs, spec["level"])[name])
        elif fields != self._fields:
            raise ValueError(f"chunk fields {fields} differ from the first chunk's {self._fields}")
        self._extend("edge_index", graphs.edge_index.astype(self._edge_dtype, copy=False), axis=1)
        for name, spec in fields.items():
            self._extend(f"{spec['level']}/{name}", getattr(graphs, spec["level"])[name])
        self._n_node.append(graphs.n_node)
        self._n_edge.append(graphs.n_edge)

    def add_failed(self, index) -> None:
        """Record source-record indices that could not be converted (stored in ``failed_index``)."""
        self._failed.append(np.asarray(index, dtype=np.int64).reshape(-1))

    def commit(self) -> Path:
        """Write sizes, offsets and metadata, close, and rename the file to ``path``."""
        if self._done:
            raise ValueError("this writer is already committed or closed")
        if self._fields is None:
            raise ValueError("no graphs were appended; refusing to write an empty store")
        f = self._file
        nn = np.concatenate(self._n_node)
        ne = np.concatenate(self._n_edge)
        small = {k: v for k, v in self._filters.items()}
        for where, arr in (("sizes/n_node", nn), ("sizes/n_edge", ne),
                           ("offsets/node", np.concatenate([[0], np.cumsum(nn)])),
                           ("offsets/edge", np.concatenate([[0], np.cumsum(ne)])),
                           ("failed_index", np.concatenate(self._failed) if self._failed
                            else np.zeros(0, np.int64))):
            arr = arr.astype(np.int64)
            f.create_dataset(where, data=arr, maxshape=(None,),
                             chunks=(max(1, min(arr.shape[0], 1 << 16)),),
                             **small)
        f.attrs["format"] = STORE_FORMAT
        f.attrs["format_version"] = STORE_VERSION
        f.attrs["name"] = self.name
        f.attrs["n_graph"] = int(nn.shape[0])
        f.attrs["fields"] = json.dumps(self._fields)
        f.attrs["meta"] = json.dumps(self.meta)
        f.close()
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self.path)
        self._done = True
        return self.path

    def discard(self) -> None:
        """Close and delete the temporary file (nothing is written to ``path``)."""
        if not self._done:
            self._done = True
            try:
                self._file.close()
            finally:
                self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "GraphStoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self._done:
            self.commit()
        else:
            self.discard()


def write_store(path: str | os.PathLike, chunks: Iterable[GraphArrays], *, name: str,
                meta: dict | None = None, failed_index=None, **options) -> Path:
    """Write all ``chunks`` to a new store at ``path`` atomically; returns the path.

    ``options`` go to `GraphStoreWriter` (``compression``, ``compression_level``, ``chunk_rows``).
    """
    with GraphStoreWriter(path, name=name, meta=meta, **options) as w:
        for chunk in chunks:
            w.append(chunk)
        if failed_index is not None:
            w.add_failed(failed_index)
    return Path(path)


# ====================================================================== reading
class GraphStore:
    """Read access to a store: sizes without graph data, one graph at a time, or ranges.

    ``cache_size`` materialised graphs are kept in an LRU cache (level 2) on top of HDF5's own
    chunk cache of ``chunk_cache_mb`` MiB per array (level 1), the IPU paper's two-level cache.
    Graph-level arrays (targets, ids) are O(G) like the sizes and are read whole on first use.
    Cached arrays are read-only. The file handle is opened lazily per process, so the store can
    be handed to DataLoader worker processes.
    """

    def __init__(self, path: str | os.PathLike, *, cache_size: int = 4096,
                 chunk_cache_mb: float = 16.0) -> None:
        self.path = Path(path)
        self.cache_size = as_nonnegative_int(cache_size, "cache_size")
        self.chunk_cache_mb = float(chunk_cache_mb)
        self._file = None
        self._pid = None
        self._datasets: dict = {}
        self._graph_arrays: dict[str, np.ndarray] = {}
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self.hits = 0
        self.misses = 0
        f = self._h5()
        try:
            self.name = str(f.attrs["name"])
            self.fields: dict[str, dict] = json.loads(f.attrs["fields"])
            self.meta: dict = json.loads(f.attrs["meta"])
            self.n_node = np.asarray(f["sizes/n_node"][...], dtype=np.int64)
            self.n_edge = np.asarray(f["sizes/n_edge"][...], dtype=np.int64)
            self.node_offsets = np.asarray(f["offsets/node"][...], dtype=np.int64)
            self.edge_offsets = np.asarray(f["offsets/edge"][...], dtype=np.int64)
            n_graph = int(f.attrs["n_graph"])
            lengths = {"node": int(self.node_offsets[-1]), "edge": int(self.edge_offsets[-1]),
                       "graph": n_graph}
            bad = []
            if self.n_node.shape[0] != n_graph or self.n_edge.shape[0] != n_graph:
                bad.append("size table length differs from n_graph")
            if not (np.array_equal(np.diff(self.node_offsets), self.n_node)
                    and np.array_equal(np.diff(self.edge_offsets), self.n_edge)
                    and self.node_offsets[0] == 0 and self.edge_offsets[0] == 0):
                bad.append("offsets disagree with sizes")
            if f["edge_index"].shape != (2, lengths["edge"]):
                bad.append(f"edge_index has shape {f['edge_index'].shape}")
            for name, spec in self.fields.items():
                ds = f[f"{spec['level']}/{name}"]
                if ds.shape != (lengths[spec["level"]], *spec["shape"]):
                    bad.append(f"{spec['level']} field {name!r} has shape {ds.shape}")
        except (KeyError, ValueError, OSError, TypeError, IndexError) as exc:
            self.close()
            raise StoreFormatError(f"{str(self.path)!r} is not a complete graph store "
                                   f"(corrupt or truncated?): {exc}") from exc
        if bad:
            self.close()
            raise StoreFormatError(f"{str(self.path)!r} is inconsistent: {'; '.join(bad)}")
        for arr in (self.n_node, self.n_edge, self.node_offsets, self.edge_offsets):
            arr.flags.writeable = False

    # ------------------------------------------------------------ file handle
    def _h5(self):
        if self._file is not None and self._pid == os.getpid():
            return self._file
        h5py = _h5py()
        if not self.path.is_file():
            raise FileNotFoundError(f"graph store {str(self.path)!r} does not exist")
        try:
            f = h5py.File(self.path, "r")
        except OSError as exc:
            raise StoreFormatError(f"cannot open {str(self.path)!r} as HDF5 "
                                   f"(truncated or corrupt file?): {exc}") from exc
        fmt = f.attrs.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode()
        if fmt != STORE_FORMAT:
            f.close()
            raise StoreFormatError(f"{str(self.path)!r} is not a graphbatch graph store "
                                   f"(format attribute {fmt!r})")
        version = int(f.attrs.get("format_version", -1))
        if version != STORE_VERSION:
            f.close()
            raise StoreFormatError(f"{str(self.path)!r} has store format version {version}; "
                                   f"this graphbatch reads version {STORE_VERSION}")
        self._file, self._pid = f, os.getpid()
        self._datasets = {}
        self._cache.clear()
        return f

    def close(self) -> None:
        """Close the HDF5 file (it is reopened on the next read)."""
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None
        self._datasets = {}

    def __enter__(self) -> "GraphStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:  # for DataLoader workers: no handle, no cache
        state = self.__dict__.copy()
        state.update(_file=None, _pid=None, _datasets={}, _graph_arrays={},
                     _cache=OrderedDict(), hits=0, misses=0)
        return state

    # ------------------------------------------------------------ metadata
    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def __repr__(self) -> str:
        return (f"GraphStore({str(self.path)!r}, name={self.name!r}, graphs={len(self)}, "
                f"fields={sorted(self.fields)})")

    def graph_sizes(self) -> GraphSizes:
        """Per-graph ``n_node``, ``n_edge`` and ``n_bytes`` (bytes of the graph's tensors once
        materialised in torch: ints as int64, floats as float32), read from metadata only."""
        node_b = sum(_torch_nbytes(s["dtype"]) * int(np.prod(s["shape"], dtype=np.int64))
                     for s in self.fields.values() if s["level"] == "node")
        edge_b = 16 + sum(_torch_nbytes(s["dtype"]) * int(np.prod(s["shape"], dtype=np.int64))
                          for s in self.fields.values() if s["level"] == "edge")
        graph_b = sum(_torch_nbytes(s["dtype"]) * int(np.prod(s["shape"], dtype=np.int64))
                      for s in self.fields.values() if s["level"] == "graph")
        n_bytes = self.n_node * node_b + self.n_edge * edge_b + graph_b
        return GraphSizes(self.n_node, self.n_edge, n_bytes)

    @property
    def failed_index(self) -> np.ndarray:
        """Source-record indices that failed conversion when the store was built."""
        return np.asarray(self._h5()["failed_index"][...], dtype=np.int64)

    def graph_field(self, name: str) -> np.ndarray:
        """The whole graph-level array ``name`` (e.g. targets ``y`` as ``[G, T]``)."""
        spec = self.fields.get(name)
        if spec is None or spec["level"] != "graph":
            graph_fields = [k for k, s in self.fields.items() if s["level"] == "graph"]
            raise KeyError(f"no graph-level field {name!r}; available: {graph_fields}")
        return self._graph_array(name)

    # ------------------------------------------------------------ graph data
    def _dataset(self, where: str):
        """The open h5py dataset ``where``; kept open so its chunk cache survives between reads."""
        f = self._h5()
        ds = self._datasets.get(where)
        if ds is None:
            # a per-dataset chunk cache: HDF5 shares one open file between handles, so the
            # file-level setting of whoever opened the file first would otherwise win
            h5py = _h5py()
            dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
            dapl.set_chunk_cache(10007, int(self.chunk_cache_mb * 2**20), 0.75)
            ds = h5py.Dataset(h5py.h5d.open(f.id, where.encode(), dapl))
            self._datasets[where] = ds
        return ds

    def _read(self, where: str, index) -> np.ndarray:
        try:
            return self._dataset(where)[index]
        except OSError as exc:
            raise StoreFormatError(f"{str(self.path)!r}: cannot read {where} "
                                   f"(damaged data, checksum failed?): {exc}") from exc

    def _index(self, i) -> int:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"graph index must be an int, got {i!r}")
        n = len(self)
        if not -n <= int(i) < n:
            raise IndexError(f"graph index {int(i)} out of range for {n} graphs")
        return int(i) % n

    def read_graph(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` read from disk (no LRU cache): ``{"edge_index": [2, E], field: array}``;
        graph-level fields keep a leading dimension of 1."""
        i = self._index(i)
        a, b = self.node_offsets[i], self.node_offsets[i + 1]
        c, d = self.edge_offsets[i], self.edge_offsets[i + 1]
        rows = {"node": slice(a, b), "edge": slice(c, d)}
        out = {"edge_index": self._read("edge_index", (slice(None), slice(c, d)))}
        for name, spec in self.fields.items():
            if spec["level"] == "graph":
                out[name] = self._graph_array(name)[i:i + 1].copy()
            else:
                out[name] = self._read(f"{spec['level']}/{name}", rows[spec["level"]])
        return out

    def _graph_array(self, name: str) -> np.ndarray:
        """Graph-level arrays are O(G) like the sizes: read whole on first use, kept in memory."""
        arr = self._graph_arrays.get(name)
        if arr is None:
            arr = self._graph_arrays[name] = self._read(f"graph/{name}", slice(None))
            arr.flags.writeable = False
        return arr

    def get(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` through the LRU cache (arrays are read-only; copy before modifying)."""
        i = self._index(i)
        self._h5()  # a new process starts with an empty cache
        hit = self._cache.get(i)
        if hit is not None:
            self._cache.move_to_end(i)
            self.hits += 1
            return hit
        self.misses += 1
        graph = self.read_graph(i)
        for arr in graph.values():
            arr.flags.writeable = False
        if self.cache_size:
            self._cache[i] = graph
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return graph

    __getitem__ = get

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield self.read_graph(i)

    def cache_info(self) -> dict[str, int]:
        """``hits``, ``misses``, ``size`` and ``maxsize`` of the materialised-graph LRU cache."""
        return {"hits": self.hits, "misses": self.misses, "size": len(self._cache),
                "maxsize": self.cache_size}

    def clear_cache(self) -> None:
        self._cache.clear()
        self.hits = self.misses = 0

    def arrays(self, start: int = 0, stop: int | None = None) -> GraphArrays:
        """Graphs ``start:stop`` as one `GraphArrays` (one contiguous read per array)."""
        stop = len(self) if stop is None else int(stop)
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"range {start}:{stop} is outside 0:{len(self)}")
        rows = {"node": slice(self.node_offsets[start], self.node_offsets[stop]),
                "edge": slice(self.edge_offsets[start], self.edge_offsets[stop]),
                "graph": slice(start, stop)}
        per_level = {level: {} for level in LEVELS}
        for name, spec in self.fields.items():
            per_level[spec["level"]][name] = self._read(f"{spec['level']}/{name}",
                                                        rows[spec["level"]])
        return GraphArrays(n_node=self.n_node[start:stop], n_edge=self.n_edge[start:stop],
                           edge_index=self._read("edge_index", (slice(None), rows["edge"])),
                           **per_level)

    def verify(self) -> None:
        """Read every array once so that HDF5 checks all chunk checksums; raises
        `StoreFormatError` on the first damaged one."""
        f = self._h5()
        names = ["edge_index", "failed_index"] + [f"{s['level']}/{k}"
                                                  for k, s in self.fields.items()]
        for where in names:
            ds = f[where]
            if ds.chunks is None or ds.size == 0:
                self._read(where, ...)
                continue
            axis = 1 if where == "edge_index" else 0
            step = ds.chunks[axis] * 64
            for s in range(0, ds.shape[axis], step):
                idx = [slice(None)] * ds.ndim
                idx[axis] = slice(s, s + step)
                self._read(where, tuple(idx))

    def to_torch(self, **options):
        """This store as a ``torch.utils.data.Dataset`` of PyG ``Data`` (imports torch now)."""
        from ._torch import GraphStoreDataset

        return GraphStoreDataset(self, **options)
