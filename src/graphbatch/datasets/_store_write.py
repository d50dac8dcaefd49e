"""Writing a graph store: `GraphStoreWriter` (chunks of graphs in, one format-3 file out,
renamed into place when complete), `write_store`, and the clean-up of temporaries that killed
builds leave behind (`remove_stale_temporaries`). The file layout is `graphbatch.datasets._store`'s
module docstring; the prefix and JSON header are `graphbatch.datasets._header`'s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid as uuidlib
import zlib
from collections.abc import Callable, Iterable
from io import BufferedWriter
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError
from .._io import check_output_path
from ._chunkcheck import CHUNK_BYTES, chunk_bounds, chunk_crcs
from ._graphs import GraphArrays
from ._header import (
    BLOCK_BYTES,
    PREFIX_BYTES,
    array_crc32,
    chunk_columns,
    h5py_module,
    header_json,
    pack_prefix,
)
from ._store_map import read_header

__all__ = ["STORE_SUFFIXES", "GraphStoreWriter", "remove_stale_temporaries", "write_store"]

#: File name endings of a store (what `GraphStoreWriter` accepts).
STORE_SUFFIXES = (".h5", ".hdf5")


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
        h5py_module()
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
        step = max(1, BLOCK_BYTES // max(1, per_row))
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
                crc = array_crc32(block, crc)
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
        target = self._tmp / "store.h5"
        header_offset, blob = self._write_file(target)
        with open(target, "r+b") as fh:  # the userblock: HDF5 leaves it to us
            fh.write(pack_prefix(header_offset, len(blob), zlib.crc32(blob)))
        read_header(target)  # the layout a reader needs (contiguous, in bounds) really holds
        if check is not None:
            check(target)
        os.chmod(target, 0o644)
        os.replace(target, self.path)
        self._done = True
        self._cleanup()
        return self.path

    def _size_arrays(self) -> dict[str, np.ndarray]:
        """The small int64 arrays: per-graph sizes, their offsets, and the failed indices."""
        nn = np.concatenate(self._n_node).astype(np.int64)
        ne = np.concatenate(self._n_edge).astype(np.int64)
        return {
            "sizes/n_node": nn,
            "sizes/n_edge": ne,
            "offsets/node": np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
            "offsets/edge": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            "failed_index": (
                np.concatenate(self._failed) if self._failed else np.zeros(0, np.int64)
            ),
        }

    def _write_file(self, target: Path) -> tuple[int, bytes]:
        """Write every dataset and the JSON header to the HDF5 file ``target``; returns the
        header's file offset and bytes (for the prefix)."""
        assert self._fields is not None and self._edge_dtype is not None  # checked by commit
        small = self._size_arrays()
        nn, ne = small["sizes/n_node"], small["sizes/n_edge"]
        totals = {"node": int(nn.sum()), "edge": int(ne.sum()), "graph": int(nn.shape[0])}
        with h5py_module().File(target, "w", libver="latest", userblock_size=PREFIX_BYTES) as f:
            checksums: dict[str, int] = {}
            for where, arr in small.items():
                f.create_dataset(where, data=arr)
                checksums[where] = array_crc32(np.ascontiguousarray(arr))
            checksums.update(self._write_data(f, totals))
            f.flush()
            bounds = chunk_bounds(self._graph_bytes(nn, ne), CHUNK_BYTES)
            checksums.update(self._write_checks(f, target, small, bounds))
            f.flush()
            blob = self._header_blob(f, checksums, totals, int(bounds.shape[0]) - 1)
            hds = f.create_dataset("header", data=np.frombuffer(blob, dtype=np.uint8))
            f.flush()
            return hds.id.get_offset(), blob

    def _write_data(self, f: Any, totals: dict[str, int]) -> dict[str, int]:
        """Copy the spilled ``edge_index`` and field arrays into the open file ``f``
        (``totals``: rows per level); returns their CRC-32s."""
        assert self._fields is not None and self._edge_dtype is not None  # checked by commit
        edge_dtype = self._edge_dtype
        checksums = {}
        ds = f.create_dataset("edge_index", shape=(2, totals["edge"]), dtype=edge_dtype)
        crc = 0
        for r in (0, 1):
            crc = self._copy_spill(ds, f"edge_index/{r}", edge_dtype, (), crc, row=r)
        checksums["edge_index"] = crc
        for name, spec in self._fields.items():
            where = f"{spec['level']}/{name}"
            dtype = np.dtype(spec["dtype"])
            ds = f.create_dataset(where, shape=(totals[spec["level"]], *spec["shape"]), dtype=dtype)
            checksums[where] = self._copy_spill(ds, where, dtype, tuple(spec["shape"]), 0)
        return checksums

    def _write_checks(
        self, f: Any, target: Path, small: dict[str, np.ndarray], bounds: np.ndarray
    ) -> dict[str, int]:
        """Write the check-chunk table (``bounds``: graph boundaries of the chunks), its CRCs
        computed from the bytes now in the file; returns the two arrays' CRC-32s."""
        assert self._fields is not None  # checked by commit
        columns = chunk_columns(self._fields)
        maps = {w: _map_dataset(target, f[w]) for w in [*small, *columns]}
        table = chunk_crcs(maps, columns, bounds, small["offsets/node"], small["offsets/edge"])
        del maps
        checksums = {}
        for where, arr in (("checks/chunk_graphs", bounds), ("checks/chunk_crc32", table)):
            f.create_dataset(where, data=arr)
            checksums[where] = array_crc32(np.ascontiguousarray(arr))
        return checksums

    def _header_blob(
        self, f: Any, checksums: dict[str, int], totals: dict[str, int], n_chunks: int
    ) -> bytes:
        """The JSON header of the file ``f``, whose datasets all hold their final bytes."""
        assert self._fields is not None and self._edge_dtype is not None  # checked by commit
        arrays = {}
        for where, crc in checksums.items():
            ds = f[where]
            nbytes = int(np.prod(ds.shape, dtype=np.int64)) * ds.dtype.itemsize
            arrays[where] = (ds.id.get_offset() if nbytes else None, ds.shape, ds.dtype, crc)
        return header_json(
            uuid=uuidlib.uuid4().hex,
            name=self.name,
            meta=self.meta,
            n_graph=totals["graph"],
            totals=totals,
            fields=self._fields,
            edge_dtype=self._edge_dtype,
            arrays=arrays,
            n_chunks=n_chunks,
            target_bytes=CHUNK_BYTES,
        )

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
