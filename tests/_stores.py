"""Store files for format tests: a format-2 store written as graphbatch wrote it before format
3, and header surgery on format-3 stores (for "a writer that got it wrong" cases)."""

from __future__ import annotations

import json
import struct
import uuid as uuidlib
import zlib
from pathlib import Path

import numpy as np


def write_v2(path, graphs, *, name="v2", meta=None, failed_index=()) -> Path:
    """A format-2 store (contiguous datasets, header in HDF5 attributes with ``header_crc``)."""
    import h5py

    from graphbatch.datasets._store_legacy import _header_crc

    nn, ne = graphs.n_node.astype(np.int64), graphs.n_edge.astype(np.int64)
    small = {
        "sizes/n_node": nn,
        "sizes/n_edge": ne,
        "offsets/node": np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
        "offsets/edge": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
        "failed_index": np.asarray(failed_index, dtype=np.int64).reshape(-1),
    }
    fields, sums = {}, {}
    with h5py.File(path, "w", libver="latest") as f:
        for where, arr in small.items():
            f.create_dataset(where, data=arr)
            sums[where] = zlib.crc32(np.ascontiguousarray(arr))
        f.create_dataset("edge_index", data=graphs.edge_index)
        sums["edge_index"] = zlib.crc32(np.ascontiguousarray(graphs.edge_index))
        for level in ("node", "edge", "graph"):
            for k, v in getattr(graphs, level).items():
                f.create_dataset(f"{level}/{k}", data=v)
                sums[f"{level}/{k}"] = zlib.crc32(np.ascontiguousarray(v))
                fields[k] = {"level": level, "dtype": v.dtype.str, "shape": list(v.shape[1:])}
        f.attrs["format"] = "graphbatch-graph-store"
        f.attrs["format_version"] = 2
        f.attrs["uuid"] = uuidlib.uuid4().hex
        f.attrs["name"] = name
        f.attrs["n_graph"] = len(nn)
        f.attrs["n_node_total"] = int(nn.sum())
        f.attrs["n_edge_total"] = int(ne.sum())
        f.attrs["edge_index_dtype"] = graphs.edge_index.dtype.str
        f.attrs["fields"] = json.dumps(fields)
        f.attrs["meta"] = json.dumps(meta or {})
        f.attrs["checksums"] = json.dumps(sums)
        f.attrs["header_crc"] = _header_crc(f.attrs)
    return Path(path)


_PREFIX = struct.Struct("<8sIIQQI")


def read_header(path) -> dict:
    """The JSON header of a format-3 store."""
    raw = Path(path).read_bytes()
    _, _, _, off, length, _ = _PREFIX.unpack_from(raw)
    return json.loads(raw[off : off + length])


def write_header(path, body: dict, *, fix_crc: bool = True) -> None:
    """Replace a format-3 store's header by ``body`` (appended at the end of the file; the
    prefix points to it). ``fix_crc=False`` keeps the old header CRC (a damaged header)."""
    path = Path(path)
    raw = bytearray(path.read_bytes())
    magic, version, res, _, _, crc = _PREFIX.unpack_from(raw)
    blob = json.dumps(body).encode()
    off = len(raw)
    head = _PREFIX.pack(magic, version, res, off, len(blob), zlib.crc32(blob) if fix_crc else crc)
    raw[: _PREFIX.size + 4] = head + struct.pack("<I", zlib.crc32(head))
    path.write_bytes(bytes(raw) + blob)


def edit_header(path, change, *, fix_crc: bool = True) -> None:
    """``change(body)`` edits the header dict in place; then `write_header`."""
    body = read_header(path)
    change(body)
    write_header(path, body, fix_crc=fix_crc)


def write_v1(
    path, graphs, *, chunk_rows: int = 8, name="old", meta=None, failed_index=(5,)
) -> Path:
    """A format-1 store as graphbatch wrote it before format 2 (chunked, gzip, shuffle,
    Fletcher-32; earliest HDF5 file format, so v1 B-tree chunk indexes), in small chunks so
    that the chunk indexes have many entries."""
    import h5py

    filters = {"compression": "gzip", "shuffle": True, "fletcher32": True}

    def put(f, where, arr, rows):
        arr = np.asarray(arr)
        chunks = (min(arr.shape[0], rows), *arr.shape[1:]) if arr.size else None
        f.create_dataset(where, data=arr, chunks=chunks, **(filters if arr.size else {}))

    with h5py.File(path, "w") as f:
        put(f, "sizes/n_node", graphs.n_node, chunk_rows)
        put(f, "sizes/n_edge", graphs.n_edge, chunk_rows)
        put(f, "offsets/node", graphs.node_offsets, chunk_rows)
        put(f, "offsets/edge", graphs.edge_offsets, chunk_rows)
        f.create_dataset(
            "edge_index",
            data=graphs.edge_index,
            chunks=(2, min(graphs.edge_index.shape[1], 2 * chunk_rows)),
            **filters,
        )
        put(f, "failed_index", np.asarray(failed_index, np.int64), chunk_rows)
        fields = {}
        for level in ("node", "edge", "graph"):
            for k, v in getattr(graphs, level).items():
                put(f, f"{level}/{k}", v, 2 * chunk_rows)
                fields[k] = {"level": level, "dtype": v.dtype.str, "shape": list(v.shape[1:])}
        f.attrs.update(
            format="graphbatch-graph-store",
            format_version=1,
            name=name,
            n_graph=len(graphs),
            fields=json.dumps(fields),
            meta=json.dumps(meta or {"a": 1}),
        )
    return Path(path)


def graph_arrays_dict(graphs) -> dict:
    """Every array of a `GraphArrays` by store path (what a converted store must hold)."""
    out = {"n_node": graphs.n_node, "n_edge": graphs.n_edge, "edge_index": graphs.edge_index}
    for level in ("node", "edge", "graph"):
        out.update({f"{level}/{k}": v for k, v in getattr(graphs, level).items()})
    return out
