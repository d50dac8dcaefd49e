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
attributes) open through `graphbatch.datasets._h5probe`, without chunk checks; format 1 only
converts (`graphbatch.datasets.convert_store`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid as uuidlib
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from io import BufferedWriter
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .._errors import (
    EdgeIndexError,
    InputError,
    InputTypeError,
    StoreFormatError,
    UnknownNameError,
)
from .._io import check_output_path, open_regular
from .._padbatch import PackedGraphs, PaddedArrays, _index, pad_batch
from .._sizes import GraphSizes
from .._validate import as_nonnegative_int
from ._chunkcheck import CHUNK_BYTES, ChunkChecker, chunk_bounds, chunk_crcs
from ._graphs import LEVELS, GraphArrays
from ._header import (
    PREFIX_BYTES,
    SMALL_ARRAYS,
    STORE_FORMAT,
    STORE_VERSION,
    StoreHeader,
    check_dtype,
    check_fields,
    chunk_columns,
    expected_arrays,
    header_json,
    pack_prefix,
    read_header_v3,
    sniff,
)

if TYPE_CHECKING:
    from ..torch import GraphStoreDataset

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "GraphStore",
    "GraphStoreWriter",
    "StoreFormatError",
    "StoreFormatWarning",
    "remove_stale_temporaries",
    "write_store",
]

_BLOCK_BYTES = 1 << 25  # 32 MiB: streaming unit for writes and checksums
_MAX_COUNT = 1 << 48  # no store holds more rows than this (header values are bounded)
_SMALL = SMALL_ARRAYS
#: File name endings of a store (what `GraphStoreWriter` accepts).
STORE_SUFFIXES = (".h5", ".hdf5")


class StoreFormatWarning(UserWarning):
    """A store opens, but with less protection than the current format gives (e.g. a
    format-2 store has no per-chunk checksums)."""


def _h5py() -> ModuleType:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - h5py is in the data extra
        raise ImportError("the graph store needs h5py: pip install 'graphbatch[data]'") from exc
    return h5py


def _torch_nbytes(dtype: np.dtype) -> int:
    """Bytes per element once materialised as a torch tensor (int64 / float32 / bool)."""
    kind = np.dtype(dtype).kind
    return 1 if kind == "b" else 8 if kind in "iu" else 4


# ====================================================================== temporaries
def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's live process
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike, *, max_age_s: float = 3600.0) -> list[Path]:
    """Delete temporaries left next to ``path`` by killed or crashed builds of the same target.

    Temporaries are named ``.<name>.<pid>.<random>.tmp``; one whose writer process is no longer
    alive is stale. Older temporaries without a pid (``.<name>.<random>.tmp``, written by earlier
    versions) count as stale once untouched for ``max_age_s`` seconds. Returns what was deleted.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        return []
    prefix = _temp_prefix(path)
    removed = []
    for p in directory.iterdir():
        name = p.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        middle = name[len(prefix) : -len(".tmp")]
        m = re.fullmatch(r"(\d+)\.[a-z0-9_]{8}", middle)  # tempfile's 8 random characters
        if m is not None:
            stale = int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1)))
        elif re.fullmatch(r"[a-z0-9_]{8}", middle):
            try:
                stale = time.time() - p.stat().st_mtime > max_age_s
            except FileNotFoundError:
                continue
        else:  # another target's temporary (e.g. of "<name>.bak"): not ours
            continue
        if stale:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


# ====================================================================== writing
class GraphStoreWriter:
    """Append `GraphArrays` chunks to a new store; `commit` writes the file and renames it into
    place.

    Chunks are spilled to raw files in a temporary folder ``.<name>.<pid>.<random>.tmp`` next to
    ``path`` (removed on commit or on any error; a killed build's folder is removed by the next
    build of the same target, see `remove_stale_temporaries`). Use as a context manager: leaving
    the block normally commits, an exception discards everything and leaves an existing
    ``path`` untouched.
    """

    def __init__(self, path: str | os.PathLike, *, name: str, meta: dict | None = None) -> None:
        _h5py()
        check_output_path(path, (), "store path", suffixes=STORE_SUFFIXES, what="graph store")
        self.path = Path(path)
        self.name = str(name)
        self.meta = dict(meta or {})
        json.dumps(self.meta)  # fail early on metadata that JSON cannot hold
        directory = self.path.parent if str(self.path.parent) else Path(".")
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.path)
        self._tmp = Path(
            tempfile.mkdtemp(
                prefix=f"{_temp_prefix(self.path)}{os.getpid()}.", suffix=".tmp", dir=directory
            )
        )
        self._spill: dict[str, BufferedWriter] = {}
        self._fields: dict[str, dict[str, Any]] | None = None
        self._edge_dtype: np.dtype | None = None
        self._n_node: list[np.ndarray] = []
        self._n_edge: list[np.ndarray] = []
        self._failed: list[np.ndarray] = []
        self._done = False

    def _write(self, key: str, arr: np.ndarray) -> None:
        fh = self._spill.get(key)
        if fh is None:
            # one spill file per array, open across appends; commit and _cleanup close them
            fh = self._spill[key] = open(self._tmp / f"{len(self._spill)}.bin", "wb")  # noqa: SIM115
        fh.write(np.ascontiguousarray(arr).tobytes())

    def append(self, graphs: GraphArrays) -> None:
        """Add ``graphs`` after those already written (same fields, dtypes, trailing shapes)."""
        if self._done:
            raise InputError("this writer is already committed or closed")
        if not isinstance(graphs, GraphArrays):
            raise InputTypeError(f"append needs a GraphArrays, got {type(graphs).__name__}")
        fields = {
            name: {
                "level": level,
                "dtype": getattr(graphs, level)[name].dtype.str,
                "shape": list(getattr(graphs, level)[name].shape[1:]),
            }
            for name, level in graphs.fields().items()
        }
        if self._fields is None:
            self._fields = fields
            self._edge_dtype = graphs.edge_index.dtype
        elif fields != self._fields:
            raise InputError(f"chunk fields {fields} differ from the first chunk's {self._fields}")
        ei = graphs.edge_index.astype(self._edge_dtype, copy=False)
        self._write("edge_index/0", ei[0])
        self._write("edge_index/1", ei[1])
        for name, spec in fields.items():
            self._write(f"{spec['level']}/{name}", getattr(graphs, spec["level"])[name])
        self._n_node.append(graphs.n_node)
        self._n_edge.append(graphs.n_edge)

    def add_failed(self, index: Any) -> None:
        """Record source-record indices that could not be converted (stored in ``failed_index``)."""
        self._failed.append(np.asarray(index, dtype=np.int64).reshape(-1))

    def _copy_spill(
        self,
        ds: Any,
        key: str,
        dtype: np.dtype,
        row_shape: tuple[int, ...],
        crc: int,
        row: int | None = None,
    ) -> int:
        """Stream spill file ``key`` into dataset ``ds`` (row ``row`` of a 2-D one); returns the
        CRC-32 chained over the bytes written."""
        fh = self._spill.get(key)
        if fh is None:
            return crc
        fh.close()
        per_row = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
        step = max(1, _BLOCK_BYTES // max(1, per_row))
        with open(fh.name, "rb") as src:
            start = 0
            while True:
                block = np.fromfile(
                    src, dtype=dtype, count=step * int(np.prod(row_shape, dtype=np.int64))
                )
                if block.size == 0:
                    break
                block = block.reshape(-1, *row_shape)
                stop = start + block.shape[0]
                if row is None:
                    ds[start:stop] = block
                else:
                    ds[row, start:stop] = block
                crc = _crc32(block, crc)
                start = stop
        return crc

    def _graph_bytes(self, nn: np.ndarray, ne: np.ndarray) -> np.ndarray:
        """Data bytes of each graph over all arrays (for the check chunk grid)."""
        assert self._fields is not None  # set by the first append, checked by commit
        per = {"node": 0, "edge": 2 * np.dtype(self._edge_dtype).itemsize, "graph": 0}
        for spec in self._fields.values():
            per[spec["level"]] += np.dtype(spec["dtype"]).itemsize * int(
                np.prod(spec["shape"], dtype=np.int64)
            )
        return nn * per["node"] + ne * per["edge"] + per["graph"]

    def commit(self, check: Callable[[Path], object] | None = None) -> Path:
        """Write the store file, check its layout, and rename it to ``path``. ``check(file)``,
        if given, is called with the finished temporary file before the rename; if it raises,
        nothing is renamed (leave the ``with`` block by that exception to discard the rest)."""
        if self._done:
            raise InputError("this writer is already committed or closed")
        if self._fields is None:
            raise InputError("no graphs were appended; refusing to write an empty store")
        edge_dtype = self._edge_dtype
        assert edge_dtype is not None  # set with _fields by the first append
        h5py = _h5py()
        nn = np.concatenate(self._n_node).astype(np.int64)
        ne = np.concatenate(self._n_edge).astype(np.int64)
        n_graph, n_tot, e_tot = int(nn.shape[0]), int(nn.sum()), int(ne.sum())
        small = {
            "sizes/n_node": nn,
            "sizes/n_edge": ne,
            "offsets/node": np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
            "offsets/edge": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            "failed_index": (
                np.concatenate(self._failed) if self._failed else np.zeros(0, np.int64)
            ),
        }
        target = self._tmp / "store.h5"
        checksums: dict[str, int] = {}
        totals = {"node": n_tot, "edge": e_tot, "graph": n_graph}
        with h5py.File(target, "w", libver="latest", userblock_size=PREFIX_BYTES) as f:
            for where, arr in small.items():
                f.create_dataset(where, data=arr)
                checksums[where] = _crc32(np.ascontiguousarray(arr))
            ds = f.create_dataset("edge_index", shape=(2, e_tot), dtype=edge_dtype)
            crc = 0
            for r in (0, 1):
                crc = self._copy_spill(ds, f"edge_index/{r}", edge_dtype, (), crc, row=r)
            checksums["edge_index"] = crc
            for name, spec in self._fields.items():
                where = f"{spec['level']}/{name}"
                dtype = np.dtype(spec["dtype"])
                ds = f.create_dataset(
                    where, shape=(totals[spec["level"]], *spec["shape"]), dtype=dtype
                )
                checksums[where] = self._copy_spill(ds, where, dtype, tuple(spec["shape"]), 0)
            # per-chunk CRCs, computed from the bytes now in the file
            f.flush()
            bounds = chunk_bounds(self._graph_bytes(nn, ne), CHUNK_BYTES)
            maps = {w: _map_dataset(target, f[w]) for w in [*small, *chunk_columns(self._fields)]}
            table = chunk_crcs(
                maps,
                chunk_columns(self._fields),
                bounds,
                small["offsets/node"],
                small["offsets/edge"],
            )
            del maps
            for where, arr in (("checks/chunk_graphs", bounds), ("checks/chunk_crc32", table)):
                f.create_dataset(where, data=arr)
                checksums[where] = _crc32(np.ascontiguousarray(arr))
            f.flush()
            arrays = {}
            for where, crc in checksums.items():
                ds = f[where]
                nbytes = int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
                arrays[where] = (ds.id.get_offset() if nbytes else None, ds.shape, ds.dtype, crc)
            blob = header_json(
                uuid=uuidlib.uuid4().hex,
                name=self.name,
                meta=self.meta,
                n_graph=n_graph,
                totals=totals,
                fields=self._fields,
                edge_dtype=edge_dtype,
                arrays=arrays,
                n_chunks=int(bounds.shape[0]) - 1,
                target_bytes=CHUNK_BYTES,
            )
            hds = f.create_dataset("header", data=np.frombuffer(blob, dtype=np.uint8))
            f.flush()
            header_offset = hds.id.get_offset()
        with open(target, "r+b") as fh:  # the userblock: HDF5 leaves it to us
            fh.write(pack_prefix(header_offset, len(blob), zlib.crc32(blob)))
        _read_header(target)  # the layout a reader needs (contiguous, in bounds) really holds
        if check is not None:
            check(target)
        os.chmod(target, 0o644)
        os.replace(target, self.path)
        self._done = True
        self._cleanup()
        return self.path

    def _cleanup(self) -> None:
        for fh in self._spill.values():
            fh.close()
        self._spill = {}
        shutil.rmtree(self._tmp, ignore_errors=True)

    def discard(self) -> None:
        """Delete the temporary folder (nothing is written to ``path``)."""
        if not self._done:
            self._done = True
            self._cleanup()

    def __enter__(self) -> GraphStoreWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and not self._done:
            try:
                self.commit()
            finally:
                self.discard()
        else:
            self.discard()


def _map_dataset(path: Path, ds: Any) -> np.ndarray:
    """The contiguous dataset ``ds`` of the file ``path`` as a read-only memory map."""
    nbytes = int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
    if nbytes == 0:
        return np.zeros(ds.shape, dtype=ds.dtype)
    return np.memmap(path, dtype=ds.dtype, mode="r", offset=ds.id.get_offset(), shape=ds.shape)


def write_store(
    path: str | os.PathLike,
    chunks: Iterable[GraphArrays],
    *,
    name: str,
    meta: dict[str, Any] | None = None,
    failed_index: Any = None,
) -> Path:
    """Write all ``chunks`` to a new store at ``path`` atomically; returns the path."""
    with GraphStoreWriter(path, name=name, meta=meta) as w:
        for chunk in chunks:
            w.append(chunk)
        if failed_index is not None:
            w.add_failed(failed_index)
    return Path(path)


# ====================================================================== header
_Header = StoreHeader

#: Attributes of a format-2 store's header (HDF5 attributes, read only by `_read_header_h5`).
_HEADER_KEYS = (
    "format",
    "format_version",
    "uuid",
    "name",
    "n_graph",
    "n_node_total",
    "n_edge_total",
    "edge_index_dtype",
    "fields",
    "meta",
    "checksums",
)


def _header_crc(attrs: Any) -> int:
    """CRC-32 of a format-2 store's header attributes. HDF5 checksums object headers, but
    variable-length string values live in its global heap, which has no checksum: this covers
    them."""
    values = {
        k: (attrs[k].decode() if isinstance(attrs[k], bytes) else attrs[k]) for k in _HEADER_KEYS
    }
    values = {k: (v if isinstance(v, str) else int(v)) for k, v in values.items()}
    return zlib.crc32(json.dumps(values, sort_keys=True).encode())


def _attr_str(attrs: Any, key: str) -> str:
    v = attrs[key]
    if isinstance(v, bytes):
        v = v.decode()
    if not isinstance(v, str):
        raise InputTypeError(f"attribute {key!r} is not a string")
    return v


def _attr_count(attrs: Any, key: str) -> int:
    v = attrs[key]
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise InputTypeError(f"attribute {key!r} is not an integer")
    v = int(v)
    if not 0 <= v <= _MAX_COUNT:
        raise InputError(f"attribute {key!r} = {v} is out of range")
    return v


def _read_header(path: Path) -> _Header:
    """Parse and check the header of the store at ``path`` (no data array is read): a
    format-3 store with plain file reads (`graphbatch.datasets._header`), a format-2 one
    through h5py in a child process with a time limit (`graphbatch.datasets._h5probe`).
    Raises ``FileNotFoundError``, `graphbatch.InputError` (not a regular file) or
    `StoreFormatError`, each naming the file."""
    path = Path(path)
    kind = sniff(path)
    if kind == "v3":
        try:
            return read_header_v3(path)
        except (ValueError, TypeError) as exc:
            raise StoreFormatError(f"{str(path)!r} is not a readable graph store: {exc}") from exc
    if kind == "hdf5":
        from ._h5probe import probe_header

        return probe_header(path)
    raise StoreFormatError(
        f"{str(path)!r} is not a graphbatch graph store (it starts with "
        "neither a graph store prefix nor an HDF5 signature)"
    )


def _read_header_h5(path: Path) -> _Header:
    """Parse and check a format-1/2 store's HDF5 header with h5py, in this process. Only
    `graphbatch.datasets._h5probe`'s child process calls this: a damaged HDF5 global heap can
    make h5py loop forever."""
    h5py = _h5py()
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreFormatError(
            f"cannot open {str(path)!r} as HDF5 (truncated or corrupt file?): {exc}"
        ) from exc
    try:
        with f:
            return _parse_header(path, f)
    except StoreFormatError:
        raise
    except Exception as exc:
        raise StoreFormatError(
            f"{str(path)!r} is not a complete graph store "
            f"(corrupt or truncated?): {type(exc).__name__}: {exc}"
        ) from exc


def _parse_header(path: Path, f: Any) -> _Header:
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != STORE_FORMAT:
        raise StoreFormatError(
            f"{str(path)!r} is not a graphbatch graph store (format attribute {fmt!r})"
        )
    version = f.attrs.get("format_version", -1)
    version = int(version) if isinstance(version, (int, np.integer)) else -1
    if version == 1:
        raise StoreFormatError(
            f"{str(path)!r} is a version-1 graph store (chunked, compressed arrays); this "
            f"graphbatch reads versions 2 and {STORE_VERSION}: convert it once with "
            f"`graphbatch data convert {path} --out NEW.h5`"
        )
    if version != 2:
        raise StoreFormatError(
            f"{str(path)!r} has store format version {version}; "
            f"this graphbatch reads versions 2 and {STORE_VERSION}"
        )
    if _attr_count(f.attrs, "header_crc") != _header_crc(f.attrs):
        raise StoreFormatError(
            f"{str(path)!r}: the header attributes do not match their checksum (damaged file)"
        )
    n_graph = _attr_count(f.attrs, "n_graph")
    totals = {
        "node": _attr_count(f.attrs, "n_node_total"),
        "edge": _attr_count(f.attrs, "n_edge_total"),
        "graph": n_graph,
    }
    fields = check_fields(json.loads(_attr_str(f.attrs, "fields")))
    meta = json.loads(_attr_str(f.attrs, "meta"))
    if not isinstance(meta, dict):
        raise InputTypeError("meta is not a JSON object")
    checksums = json.loads(_attr_str(f.attrs, "checksums"))
    edge_dtype = check_dtype(_attr_str(f.attrs, "edge_index_dtype"))
    if edge_dtype.kind not in "iu":
        raise InputError(f"edge_index dtype {edge_dtype} is not an integer type")
    expected = expected_arrays(n_graph, totals, fields, edge_dtype)
    size = path.stat().st_size
    layout = {}
    for where in [*expected, "failed_index"]:
        ds = f[where]
        if not isinstance(ds, _h5py().Dataset):
            raise InputError(f"{where} is not a dataset")
        if where == "failed_index":
            if ds.ndim != 1 or ds.shape[0] > _MAX_COUNT:
                raise InputError(f"failed_index has shape {ds.shape}")
            shape, dtype = ds.shape, np.dtype("<i8")
        else:
            shape, dtype = expected[where]
        if ds.shape != shape:
            raise InputError(f"{where} has shape {ds.shape}, the header says {shape}")
        if ds.dtype != dtype:
            raise InputError(f"{where} has dtype {ds.dtype}, the header says {dtype}")
        if ds.chunks is not None or ds.compression is not None:
            raise InputError(f"{where} is not stored contiguously")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = ds.id.get_offset() if nbytes else None
        if nbytes and (offset is None or offset < 0 or offset + nbytes > size):
            raise InputError(
                f"{where} ({nbytes} bytes at offset {offset}) lies outside the {size}-byte file"
            )
        if where not in checksums or type(checksums[where]) is not int:
            raise InputError(f"no checksum for {where}")
        layout[where] = (offset, shape, dtype)
    return _Header(
        uuid=_attr_str(f.attrs, "uuid"),
        name=_attr_str(f.attrs, "name"),
        n_graph=n_graph,
        totals=totals,
        fields=fields,
        meta=meta,
        checksums={k: checksums[k] for k in layout},
        edge_dtype=edge_dtype,
        layout=layout,
        header_crc=_attr_count(f.attrs, "header_crc"),
        format_version=2,
    )


def _crc32(arr: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of a C-contiguous array's bytes, chained on ``crc``."""
    return zlib.crc32(arr, crc)  # type: ignore[arg-type]  # a buffer (NumPy stubs: 3.12+)


def _crc(arr: np.ndarray) -> int:
    flat = arr.reshape(-1)
    step = max(1, _BLOCK_BYTES // max(1, arr.dtype.itemsize))
    crc = 0
    for s in range(0, flat.shape[0], step):
        crc = _crc32(np.ascontiguousarray(flat[s : s + step]), crc)
    return crc


# ====================================================================== reading
_WARNED: set[str] = set()


def _frozen(rows: np.ndarray) -> np.ndarray:
    """A read-only copy of ``rows`` (of a memory map): one graph's arrays outlive the map."""
    out = np.array(rows)
    out.flags.writeable = False
    return out


def _warn_unchecked(path: Path, version: int) -> None:
    """Say once per process and file that a format-2 store has no per-chunk checksums."""
    key = str(path.resolve())
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(
            f"{str(path)!r} is a format-{version} graph store: it has no per-chunk checksums, "
            "so damaged arrays are detected only by verify() (`graphbatch data verify`), not "
            f"when read; convert it once with `graphbatch data convert {path} --out NEW.h5`",
            StoreFormatWarning,
            stacklevel=3,
        )


class _MappedFile:
    """The open file behind a store's memory maps, and the bytes they span: reading a mapped
    page past the end of a file truncated since kills the process with SIGBUS, so every read
    first checks the size on this descriptor (`check`, one ``fstat``). Forked processes share
    it; a pickled copy opens its own."""

    def __init__(self, path: Path, fh: IO[bytes], span: int) -> None:
        self.path = path
        self.fh = fh
        self.span = span

    def check(self) -> None:
        """Raise `StoreFormatError` naming the file if it is now shorter than the maps."""
        size = os.fstat(self.fh.fileno()).st_size
        if size < self.span:
            raise StoreFormatError(
                f"{str(self.path)!r} was truncated while open: it holds {size:,} bytes, its "
                f"arrays span {self.span:,} (damaged or being rewritten in place); open it "
                "again once it is whole"
            )

    def close(self) -> None:
        self.fh.close()


def _map_store(
    path: Path, header: _Header, in_memory: bool, check_chunks: bool
) -> tuple[dict[str, np.ndarray], ChunkChecker | None, _MappedFile | None]:
    """The arrays of the store at ``path`` as read-only memory maps (copied into RAM when
    ``in_memory``; the small arrays always, after checking their CRC-32), checked for
    consistency (offsets against sizes and totals, increasing check-chunk bounds), the
    store's `ChunkChecker` (``None`` without check chunks or ``check_chunks``) and the
    `_MappedFile` all maps come from (``None`` when nothing stays mapped). Returns
    ``(maps, checker, file)``; raises `StoreFormatError` naming the file."""
    try:
        fh = open_regular(path, "graph store")
    except (OSError, InputError) as exc:
        raise StoreFormatError(f"{str(path)!r}: cannot open: {exc}") from exc
    try:
        maps, checker, mapped = _map_arrays(path, fh, header, in_memory, check_chunks)
    except BaseException:
        fh.close()
        raise
    if not mapped:
        fh.close()
        return maps, checker, None
    return maps, checker, _MappedFile(path, fh, mapped)


def _map_arrays(
    path: Path, fh: IO[bytes], header: _Header, in_memory: bool, check_chunks: bool
) -> tuple[dict[str, np.ndarray], ChunkChecker | None, int]:
    """`_map_store` on the open file ``fh``: ``(maps, checker, bytes the kept maps span)``."""
    maps = {}
    span = 0
    for where, (offset, shape, dtype) in header.layout.items():
        if offset is None:
            arr = np.zeros(shape, dtype=dtype)
        else:
            try:
                arr = np.memmap(fh, dtype=dtype, mode="r", offset=offset, shape=shape)
            except (OSError, ValueError) as exc:
                raise StoreFormatError(f"{str(path)!r}: cannot map {where}: {exc}") from exc
            if in_memory or where in _SMALL:
                arr = np.array(arr)
            else:
                span = max(span, offset + arr.nbytes)
        arr.flags.writeable = False
        maps[where] = arr
    for where in _SMALL:
        if where in maps and _crc(maps[where]) != header.checksums[where]:
            raise StoreFormatError(
                f"{str(path)!r}: checksum of {where} does not match (damaged file)"
            )
    nn, ne = maps["sizes/n_node"], maps["sizes/n_edge"]
    no, eo = maps["offsets/node"], maps["offsets/edge"]
    if (
        (nn < 0).any()
        or (ne < 0).any()
        or not (
            no[0] == 0
            and eo[0] == 0
            and np.array_equal(np.diff(no), nn)
            and np.array_equal(np.diff(eo), ne)
            and no[-1] == header.totals["node"]
            and eo[-1] == header.totals["edge"]
        )
    ):
        raise StoreFormatError(
            f"{str(path)!r} is inconsistent: offsets disagree with sizes or totals"
        )
    checker = None
    if header.chunk_arrays:
        bounds = maps["checks/chunk_graphs"]
        if not (bounds[0] == 0 and bounds[-1] == header.n_graph and (np.diff(bounds) > 0).all()):
            raise StoreFormatError(
                f"{str(path)!r} is inconsistent: the check chunk boundaries "
                "are not increasing from 0 to the graph count"
            )
        if check_chunks:
            checker = ChunkChecker(
                path,
                maps,
                list(header.chunk_arrays),
                bounds,
                maps["checks/chunk_crc32"],
                StoreFormatError,
            )
    return maps, checker, span


class _OpensByPath(type):
    """The metaclass of `GraphStore`: calling ``GraphStore(path, ...)`` itself is
    ``GraphStore.open(path, ...)``, the factory that picks the kind of store for ``path`` (the
    documented ``GraphStore(manifest)`` keeps working). Calling a subclass constructs that
    class, as usual."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is GraphStore:
            return cls.open(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class GraphStore(metaclass=_OpensByPath):
    """Read access to a store: sizes without graph data, one graph, a padded batch, or ranges.

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

    ``path`` may also be the JSON manifest of a sharded store (written by
    `graphbatch.datasets.build_sharded_store`): `GraphStore.open` (which ``GraphStore(path)``
    calls) then returns a `graphbatch.datasets.ShardedGraphStore`, which reads the shards as
    one store.
    """

    @classmethod
    def open(cls, path: str | os.PathLike, **options: Any) -> GraphStore:
        """The store at ``path``: the subclass that `claims` it (a
        `graphbatch.datasets.ShardedGraphStore` for a JSON manifest, judged by its first byte; a
        missing or non-regular file is left to the store's own open, which names it), else a
        single-file `GraphStore`. ``options`` are the constructor's (``cache_size``,
        ``in_memory``, ``verify``, ``check_chunks``). Raises `StoreFormatError` (an
        `InputError`) for a damaged or foreign file."""
        kind = next((sub for sub in GraphStore.__subclasses__() if sub.claims(path)), None)
        if kind is not None:
            return kind(path, **options)
        store = object.__new__(GraphStore)
        GraphStore.__init__(store, path, **options)
        return store

    @classmethod
    def claims(cls, path: str | os.PathLike) -> bool:
        """Whether ``GraphStore(path)`` should be this subclass (never for `GraphStore`)."""
        return False

    def _open_common(
        self, path: str | os.PathLike, cache_size: int, in_memory: bool, check_chunks: bool = True
    ) -> None:
        """The options every store (single file or sharded) keeps: its path, the per-graph LRU
        cache of ``cache_size`` graphs with its hit/miss counts, ``in_memory`` and
        ``check_chunks``."""
        self.path = Path(path)
        self.cache_size = as_nonnegative_int(cache_size, "cache_size")
        self.in_memory = bool(in_memory)
        self.check_chunks = bool(check_chunks)
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        cache_size: int = 4096,
        in_memory: bool = False,
        verify: bool = False,
        check_chunks: bool = True,
    ) -> None:
        self._open_common(path, cache_size, in_memory, check_chunks)
        self._maps: dict[str, np.ndarray] | None = None
        self._packed: PackedGraphs | None = None
        self._checker: ChunkChecker | None = None
        self._file: _MappedFile | None = None
        header = _read_header(self.path)
        self.uuid = header.uuid
        self.header_crc = header.header_crc
        self.format_version = header.format_version
        self.edge_index_dtype = np.dtype(header.edge_dtype)
        if header.format_version < STORE_VERSION and self.check_chunks:
            _warn_unchecked(self.path, header.format_version)
        self.name = header.name
        self.fields: dict[str, dict] = header.fields
        self.meta: dict = header.meta
        self._checksums = header.checksums
        self._open(header)
        if verify:
            self.verify()

    # ------------------------------------------------------------ arrays
    def _open(self, header: _Header) -> dict[str, np.ndarray]:
        maps, self._checker, self._file = _map_store(
            self.path, header, self.in_memory, self.check_chunks
        )
        self._maps = maps
        return maps

    def _whole(self) -> dict[str, np.ndarray]:
        """`_arrays`, after checking that the file still holds every mapped byte (one
        ``fstat``): what every read of graph data calls before touching a mapped page, which
        past the end of a truncated file would be SIGBUS (`_MappedFile`)."""
        maps = self._arrays()
        if self._file is not None:
            self._file.check()
        return maps

    def _arrays(self) -> dict[str, np.ndarray]:
        if self._maps is None:  # a copy in another process: re-open, same store or nothing
            header = _read_header(self.path)
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

    def __enter__(self) -> GraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        """For worker processes: no maps, no cache; a copy always re-opens memory-mapped (also
        from an ``in_memory`` store), so spawned workers never hold a private copy of the data."""
        state = self.__dict__.copy()
        state.update(
            _maps=None,
            _packed=None,
            _checker=None,
            _file=None,
            _cache=OrderedDict(),
            hits=0,
            misses=0,
            in_memory=False,
        )
        return state

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

    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def __repr__(self) -> str:
        return (
            f"GraphStore({str(self.path)!r}, name={self.name!r}, graphs={len(self)}, "
            f"fields={sorted(self.fields)})"
        )

    def graph_sizes(self) -> GraphSizes:
        """Per-graph ``n_node``, ``n_edge`` and ``n_bytes`` (bytes of the graph's tensors once
        materialised in torch: ints as int64, floats as float32), read from metadata only."""

        def per_row(level: str) -> int:
            return sum(
                _torch_nbytes(s["dtype"]) * int(np.prod(s["shape"], dtype=np.int64))
                for s in self.fields.values()
                if s["level"] == level
            )

        n_bytes = (
            self.n_node * per_row("node") + self.n_edge * (16 + per_row("edge")) + per_row("graph")
        )
        return GraphSizes(self.n_node, self.n_edge, n_bytes)

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

    def _index(self, i: Any) -> int:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise InputTypeError(f"graph index must be an int, got {i!r}")
        n = len(self)
        if not -n <= int(i) < n:
            raise IndexError(f"graph index {int(i)} out of range for {n} graphs")
        return int(i) % n

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

    def get(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` through the LRU cache (arrays are read-only; copy before modifying)."""
        i = self._index(i)
        hit = self._cache.get(i)
        if hit is not None:
            self._cache.move_to_end(i)
            self.hits += 1
            return hit
        self.misses += 1
        graph = self.read_graph(i)
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
        return {
            "hits": self.hits,
            "misses": self.misses,
            "size": len(self._cache),
            "maxsize": self.cache_size,
        }

    def clear_cache(self) -> None:
        self._cache.clear()
        self.hits = self.misses = 0

    def arrays(self, start: int = 0, stop: int | None = None) -> GraphArrays:
        """Graphs ``start:stop`` as one `GraphArrays` (copies; edge indices are checked)."""
        stop = len(self) if stop is None else int(stop)
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"range {start}:{stop} is outside 0:{len(self)}")
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
            if _crc(arr) != self._checksums[where]:
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

    def to_torch(self) -> GraphStoreDataset:
        """This store as a ``torch.utils.data.Dataset`` of PyG ``Data``, a
        `graphbatch.torch.GraphStoreDataset` (imports torch and PyG now)."""
        from ..torch import GraphStoreDataset

        return GraphStoreDataset(self)
