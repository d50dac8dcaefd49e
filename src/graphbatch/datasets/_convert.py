"""`convert_store`: rewrite a version-1 graph store (chunked, gzip/lzf, graphbatch <= 0.x) in the
current format. Version 1 is read only here, graph range by graph range, through h5py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ._graphs import LEVELS, GraphArrays
from ._store import STORE_FORMAT, GraphStoreWriter, StoreFormatError, _h5py

__all__ = ["convert_store"]


def _v1_chunks(f, fields: dict, n_node, n_edge, no, eo, chunk: int) -> Iterator[GraphArrays]:
    for a in range(0, n_node.shape[0], chunk):
        b = min(a + chunk, n_node.shape[0])
        rows = {"node": slice(no[a], no[b]), "edge": slice(eo[a], eo[b]), "graph": slice(a, b)}
        per_level = {level: {} for level in LEVELS}
        for name, spec in fields.items():
            per_level[spec["level"]][name] = f[f"{spec['level']}/{name}"][rows[spec["level"]]]
        yield GraphArrays(n_node=n_node[a:b], n_edge=n_edge[a:b],
                          edge_index=f["edge_index"][:, rows["edge"]], **per_level)


def convert_store(src: str | os.PathLike, out: str | os.PathLike, *,
                  chunk_graphs: int = 16384) -> Path:
    """Write the version-1 store ``src`` as a current-format store at ``out`` (atomically).

    Every graph is re-validated on the way (edge indices inside their graph, array lengths equal
    to the size table); HDF5's own Fletcher-32 checksums of the old chunks are checked as they
    are read. ``out`` must differ from ``src``. Raises `StoreFormatError` for a damaged source.
    """
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise FileNotFoundError(f"graph store {str(src)!r} does not exist")
    if out.exists() and out.resolve() == src.resolve():
        raise ValueError(f"--out {str(out)!r} is the input store; write the converted store "
                         "to another path")
    h5py = _h5py()
    try:
        f = h5py.File(src, "r")
    except OSError as exc:
        raise StoreFormatError(f"cannot open {str(src)!r} as HDF5: {exc}") from exc
    with f:
        try:
            fmt = f.attrs.get("format")
            fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
            version = int(f.attrs.get("format_version", -1))
            if fmt != STORE_FORMAT or version != 1:
                raise StoreFormatError(f"{str(src)!r} is not a version-1 graph store "
                                       f"(format {fmt!r}, version {version})")
            fields = json.loads(f.attrs["fields"])
            meta = json.loads(f.attrs["meta"])
            name = str(f.attrs["name"])
            n_node = np.asarray(f["sizes/n_node"][...], dtype=np.int64)
            n_edge = np.asarray(f["sizes/n_edge"][...], dtype=np.int64)
            no = np.concatenate([[0], np.cumsum(n_node)])
            eo = np.concatenate([[0], np.cumsum(n_edge)])
            failed = np.asarray(f["failed_index"][...], dtype=np.int64)
            with GraphStoreWriter(out, name=name, meta=meta) as w:
                for chunk in _v1_chunks(f, fields, n_node, n_edge, no, eo, int(chunk_graphs)):
                    w.append(chunk)
                w.add_failed(failed)
        except StoreFormatError:
            raise
        except (KeyError, ValueError, OSError, TypeError, IndexError) as exc:
            raise StoreFormatError(f"{str(src)!r} cannot be converted (damaged?): "
                                   f"{type(exc).__name__}: {exc}") from exc
    return out
