"""`convert_store`: rewrite a store of an earlier format in the current one (format 3).

* **Format 1** (chunked, gzip/lzf + Fletcher-32, graphbatch <= 0.x) has no checksums of its
  own beyond HDF5's Fletcher-32 of each chunk's bytes -- and the chunk *index* (an HDF5 v1
  B-tree) has none: a damaged index entry can drop a chunk (read back as zeros), point it at
  another chunk's coordinates or mark it as stored without its filters, and every such read
  passes Fletcher-32. So before reading anything in process, a child process
  (`graphbatch.datasets._h5probe`) reads the attributes and walks every dataset's chunk index
  (`check_v1`): every chunk present exactly once at an aligned, in-range position, all filters
  applied, its bytes inside the file. Then each graph range is read (Fletcher-32 checked by
  HDF5) and validated: sizes non-negative and matching every array's length, stored offsets
  (if any) equal to the prefix sums, dtypes and shapes as the field table says, every edge
  index inside its graph.
* **Format 2** (contiguous, CRC-32 per array in HDF5 attributes) is read through
  `GraphStore` (its header in a child process) and checked whole against its own CRCs first.

Either way the new store is compared with the source before it is renamed into place: it is
opened, all its CRCs checked, and every graph range read back and compared exactly with a
second read of the source; on any difference nothing is written. The source is never
modified, and ``out`` must not be the source (also through links).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import numpy as np

from .._errors import InputError, StoreFormatError
from .._io import check_output_path, check_regular_file
from ._graphs import LEVELS, GraphArrays
from ._header import STORE_FORMAT, check_fields, sniff
from ._header import h5py_module as _h5py
from ._store import GraphStore
from ._store_map import StoreFormatWarning
from ._store_write import STORE_SUFFIXES, GraphStoreWriter

__all__ = ["check_v1", "convert_store"]


# ====================================================================== format 1 (child process)
def _attr(f: Any, key: str) -> Any:
    v = f.attrs[key]
    return v.decode() if isinstance(v, bytes) else v


def _chunk_index_problem(ds: Any, file_size: int, raw: IO[bytes]) -> str | None:
    """What is wrong with the chunk index of the chunked dataset ``ds``, or ``None``
    (``raw``: the file, open for binary reading)."""
    shape, chunk = ds.shape, ds.chunks
    grid = [-(-s // c) for s, c in zip(shape, chunk, strict=True)]
    expected = int(np.prod(grid, dtype=np.int64))
    seen: set[tuple] = set()
    problems: list[str] = []

    def visit(info: Any) -> None:
        off = tuple(int(o) for o in info.chunk_offset)
        if len(off) != len(shape) or any(
            o % c or o >= max(s, 1) for o, c, s in zip(off, chunk, shape, strict=True)
        ):
            problems.append(f"a chunk at {off} is not on the {chunk} grid of shape {shape}")
        elif off in seen:
            problems.append(f"two chunks at {off}")
        seen.add(off)
        if info.filter_mask != 0:
            problems.append(
                f"the chunk at {off} is marked as stored without its filters "
                f"(mask {info.filter_mask:#x})"
            )
        if info.byte_offset is None or info.size <= 0 or info.byte_offset + info.size > file_size:
            problems.append(
                f"the chunk at {off} ({info.size} bytes at {info.byte_offset}) "
                "lies outside the file"
            )
        found.append((off, info.byte_offset, info.size, info.filter_mask))

    found: list[tuple] = []
    if hasattr(ds.id, "chunk_iter"):
        ds.id.chunk_iter(visit)
    else:  # pragma: no cover - HDF5 < 1.14
        for i in range(ds.id.get_num_chunks()):
            visit(ds.id.get_chunk_info(i))
    if problems:
        return problems[0]
    if len(seen) != expected:
        return (
            f"{len(seen)} of its {expected} chunks are in the chunk index (a missing chunk "
            "would read as zeros)"
        )
    # a walk visits the index's nodes in order, but a read finds each chunk by searching the
    # index by coordinates (comparing keys): both must find the same bytes, else a read gets
    # fill values (zeros) or another chunk. read_direct_chunk searches as a read does.
    for off, addr, size, mask in found:
        try:
            hit_mask, data = ds.id.read_direct_chunk(off)
        except (RuntimeError, OSError, ValueError) as exc:
            return f"a search for the chunk at {off} fails ({exc})"
        raw.seek(addr)
        if hit_mask != mask or bytes(data) != raw.read(size):
            return (
                f"a search for the chunk at {off} finds other bytes than the "
                f"{size} bytes at {addr} the index holds"
            )
    return None


def check_v1(path: Path) -> dict:
    """Read the attributes of the format-1 store at ``path`` and check every dataset's chunk
    index (module docstring); returns ``{version, name, meta, fields, n_graph}`` -- or
    ``{version: 2}`` for a format-2 store. Runs in `graphbatch.datasets._h5probe`'s child
    process (raises `StoreFormatError` naming the file and the dataset)."""
    h5py = _h5py()
    where = str(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreFormatError(f"cannot open {where!r} as HDF5: {exc}") from exc
    with f, ExitStack() as stack:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        version = f.attrs.get("format_version", -1)
        version = int(version) if isinstance(version, (int, np.integer)) else -1
        if fmt != STORE_FORMAT or version not in (1, 2):
            raise StoreFormatError(
                f"{where!r} is not a graph store of format 1 or 2 (format "
                f"{fmt!r}, version {version})"
            )
        if version == 2:
            return {"version": 2}
        fields = check_fields(json.loads(_attr(f, "fields")))
        meta = json.loads(_attr(f, "meta"))
        name = _attr(f, "name")
        n_graph = int(f.attrs["n_graph"])
        if not isinstance(meta, dict) or not isinstance(name, str) or n_graph < 0:
            raise StoreFormatError(f"{where!r}: bad name, meta or n_graph attribute")
        size = os.stat(path).st_size
        raw = stack.enter_context(open(path, "rb"))
        names = [
            "sizes/n_node",
            "sizes/n_edge",
            "edge_index",
            "failed_index",
            *(f"{s['level']}/{k}" for k, s in fields.items()),
        ]
        names += [w for w in ("offsets/node", "offsets/edge") if w in f]
        for w in names:
            ds = f.get(w)
            if not isinstance(ds, h5py.Dataset):
                raise StoreFormatError(f"{where!r}: {w} is missing or not a dataset")
            if ds.chunks is not None:
                try:
                    problem = _chunk_index_problem(ds, size, raw)
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                if problem:
                    raise StoreFormatError(
                        f"{where!r}: the chunk index of {w} is damaged: {problem}"
                    )
        return {"version": 1, "name": name, "meta": meta, "fields": fields, "n_graph": n_graph}


# ====================================================================== format 1 (reading)
def _read_v1_sizes(
    f: Any,
    info: dict,
    src: Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n_graph, fields = info["n_graph"], info["fields"]
    n_node = np.asarray(f["sizes/n_node"][...])
    n_edge = np.asarray(f["sizes/n_edge"][...])
    for name, arr in (("n_node", n_node), ("n_edge", n_edge)):
        if arr.shape != (n_graph,) or arr.dtype.kind not in "iu" or (arr.size and arr.min() < 0):
            raise StoreFormatError(
                f"{str(src)!r}: sizes/{name} ({arr.dtype}, shape {arr.shape}) "
                f"is not {n_graph} non-negative counts"
            )
    n_node, n_edge = n_node.astype(np.int64), n_edge.astype(np.int64)
    no = np.concatenate([[0], np.cumsum(n_node)]).astype(np.int64)
    eo = np.concatenate([[0], np.cumsum(n_edge)]).astype(np.int64)
    for key, off in (("offsets/node", no), ("offsets/edge", eo)):
        if key in f and not np.array_equal(np.asarray(f[key][...]), off):
            raise StoreFormatError(f"{str(src)!r}: {key} disagrees with the size table")
    totals = {"node": int(no[-1]), "edge": int(eo[-1]), "graph": n_graph}
    ei = f["edge_index"]
    if ei.ndim != 2 or ei.shape != (2, totals["edge"]) or ei.dtype.kind not in "iu":
        raise StoreFormatError(
            f"{str(src)!r}: edge_index ({ei.dtype}, shape {ei.shape}) does "
            f"not hold the {totals['edge']} edges of the size table"
        )
    for name, spec in fields.items():
        ds = f[f"{spec['level']}/{name}"]
        want = (totals[spec["level"]], *spec["shape"])
        if ds.shape != want or ds.dtype != np.dtype(spec["dtype"]):
            raise StoreFormatError(
                f"{str(src)!r}: {spec['level']}/{name} ({ds.dtype}, shape "
                f"{ds.shape}) differs from its description ({spec['dtype']}, "
                f"{list(want)})"
            )
    failed = np.asarray(f["failed_index"][...])
    if failed.ndim != 1 or (failed.size and failed.dtype.kind not in "iu"):
        raise StoreFormatError(f"{str(src)!r}: failed_index is not a list of indices")
    return n_node, n_edge, no, eo, failed.astype(np.int64)


def _v1_chunks(
    f: Any,
    fields: dict,
    n_node: np.ndarray,
    n_edge: np.ndarray,
    no: np.ndarray,
    eo: np.ndarray,
    chunk: int,
) -> Iterator[GraphArrays]:
    """Graph ranges of a format-1 store; `GraphArrays` checks each edge index is inside its
    graph and every length matches the sizes."""
    for a in range(0, n_node.shape[0], chunk):
        b = min(a + chunk, n_node.shape[0])
        rows = {"node": slice(no[a], no[b]), "edge": slice(eo[a], eo[b]), "graph": slice(a, b)}
        per_level: dict[str, dict[str, np.ndarray]] = {level: {} for level in LEVELS}
        for name, spec in fields.items():
            per_level[spec["level"]][name] = f[f"{spec['level']}/{name}"][rows[spec["level"]]]
        yield GraphArrays(
            n_node=n_node[a:b],
            n_edge=n_edge[a:b],
            edge_index=f["edge_index"][:, rows["edge"]],
            **per_level,
        )


# ====================================================================== both
def _same(a: GraphArrays, b: GraphArrays) -> bool:
    if not (
        np.array_equal(a.n_node, b.n_node)
        and np.array_equal(a.n_edge, b.n_edge)
        and a.edge_index.dtype == b.edge_index.dtype
        and np.array_equal(a.edge_index, b.edge_index)
    ):
        return False
    for level in LEVELS:
        x, y = getattr(a, level), getattr(b, level)
        if x.keys() != y.keys():
            return False
        for k in x:
            if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape:
                return False
            if not np.array_equal(x[k].view(np.uint8), y[k].view(np.uint8)):  # bits, NaN too
                return False
    return True


def _compare(
    new_path: Path,
    src: Path,
    name: str,
    meta: dict,
    failed: np.ndarray,
    ranges: Iterator[GraphArrays],
    chunk: int,
) -> None:
    """Open the store just written (all CRCs checked) and compare it with ``ranges``, a second
    read of the source; raise `StoreFormatError` at the first difference."""
    with GraphStore(new_path, cache_size=0, verify=True) as new:
        if new.name != name or new.meta != meta or not np.array_equal(new.failed_index, failed):
            raise StoreFormatError(
                f"{str(src)!r}: the converted store's name, meta or "
                "failed_index differ from the source's; nothing written"
            )
        start = 0
        for part in ranges:
            stop = start + len(part)
            if not _same(new.arrays(start, stop), part):
                raise StoreFormatError(
                    f"{str(src)!r}: graphs {start}:{stop} read back from the "
                    "converted store differ from the source (unstable read "
                    "or write); nothing written"
                )
            start = stop
        if start != len(new):
            raise StoreFormatError(
                f"{str(src)!r}: the converted store holds {len(new)} graphs, "
                f"the source {start}; nothing written"
            )


def _wrap(src: Path, exc: Exception) -> StoreFormatError:
    return StoreFormatError(
        f"{str(src)!r} cannot be converted (damaged?): "
        f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    )


def _convert_v1(src: Path, out: Path, info: dict, chunk: int) -> None:
    h5py = _h5py()
    fields = info["fields"]
    with h5py.File(src, "r") as f:
        try:
            n_node, n_edge, no, eo, failed = _read_v1_sizes(f, info, src)
            with GraphStoreWriter(out, name=info["name"], meta=info["meta"]) as w:
                for part in _v1_chunks(f, fields, n_node, n_edge, no, eo, chunk):
                    w.append(part)
                w.add_failed(failed)
                w.commit(
                    check=lambda tmp: _compare(
                        tmp,
                        src,
                        info["name"],
                        info["meta"],
                        failed,
                        _v1_chunks(f, fields, n_node, n_edge, no, eo, chunk),
                        chunk,
                    )
                )
        except StoreFormatError:
            raise
        except (KeyError, ValueError, OSError, TypeError, IndexError) as exc:
            raise _wrap(src, exc) from exc


def _convert_v2(src: Path, out: Path, chunk: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreFormatWarning)
        store = GraphStore(src, cache_size=0)
    with store:
        store.verify()  # the source's own CRC-32 of every array

        def ranges() -> Iterator[GraphArrays]:
            for a in range(0, len(store), chunk):
                yield store.arrays(a, min(a + chunk, len(store)))

        failed = np.array(store.failed_index)
        try:
            with GraphStoreWriter(out, name=store.name, meta=store.meta) as w:
                for part in ranges():
                    w.append(part)
                w.add_failed(failed)
                w.commit(
                    check=lambda tmp: _compare(
                        tmp, src, store.name, store.meta, failed, ranges(), chunk
                    )
                )
        except StoreFormatError:
            raise
        except (KeyError, ValueError, OSError, TypeError, IndexError) as exc:
            raise _wrap(src, exc) from exc


def convert_store(
    src: str | os.PathLike, out: str | os.PathLike, *, chunk_graphs: int = 16384
) -> Path:
    """Write the format-1 or format-2 store ``src`` as a format-3 store at ``out``
    (atomically; ``out`` must end in ``.h5``/``.hdf5`` and must not be ``src``, also through
    links). Checks the source (module docstring) and compares the result with it before it
    is renamed into place; raises `StoreFormatError` naming ``src`` for a damaged source, and
    then nothing is written."""
    src, out = Path(src), Path(out)
    check_regular_file(src, "graph store")
    check_output_path(out, [src], "--out", suffixes=STORE_SUFFIXES, what="converted store")
    chunk = int(chunk_graphs)
    if chunk < 1:
        raise InputError(f"chunk_graphs must be >= 1, got {chunk_graphs!r}")
    kind = sniff(src)
    if kind == "v3":
        raise StoreFormatError(f"{str(src)!r} is already a format-3 store; nothing to convert")
    if kind == "json":
        raise StoreFormatError(
            f"{str(src)!r} is a sharded store's manifest; convert converts "
            "one store file (its shards are stores)"
        )
    if kind != "hdf5":
        raise StoreFormatError(f"{str(src)!r} is not a graphbatch graph store")
    from ._h5probe import probe_v1

    info = probe_v1(src)
    if info["version"] == 2:
        _convert_v2(src, out, chunk)
    else:
        _convert_v1(src, out, info, chunk)
    return out
