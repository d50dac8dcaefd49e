"""Format-2 (and the refusal of format-1) store headers, parsed with h5py.

A format-2 store keeps its header in HDF5 attributes of the root group (``format``,
``format_version``, ``uuid``, ``name``, counts, ``fields``, ``meta``, ``checksums`` as JSON
strings, and ``header_crc``: the CRC-32 of those attributes, `_header_crc`); its arrays are
the same contiguous datasets as format 3's, without check chunks. HDF5 keeps variable-length
strings in its unchecksummed global heap, whose parser can loop forever on a damaged byte, so
only the time-limited child process of `graphbatch.datasets._h5probe` calls
`read_header_h5`. Format 1 (chunked, compressed arrays) is refused here with the command that
converts it (`graphbatch.datasets.convert_store`).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import InputError, InputTypeError, StoreFormatError
from ._header import (
    MAX_COUNT,
    STORE_FORMAT,
    STORE_VERSION,
    StoreHeader,
    check_dtype,
    check_fields,
    expected_arrays,
    h5py_module,
)

__all__ = ["read_header_h5"]


#: Attributes of a format-2 store's header (HDF5 attributes, read only by `read_header_h5`).
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
    if not 0 <= v <= MAX_COUNT:
        raise InputError(f"attribute {key!r} = {v} is out of range")
    return v


def read_header_h5(path: Path) -> StoreHeader:
    """Parse and check a format-1/2 store's HDF5 header with h5py, in this process. Only
    `graphbatch.datasets._h5probe`'s child process calls this: a damaged HDF5 global heap can
    make h5py loop forever. Raises `StoreFormatError` naming the file (a format-1 store: with
    the command that converts it)."""
    h5py = h5py_module()
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise StoreFormatError(
            f"cannot open {str(path)!r} as HDF5 (truncated or corrupt file?): {exc}"
        ) from exc
    try:
        with f:
            _check_version(path, f.attrs)
            return _parse_v2(path, f)
    except StoreFormatError:
        raise
    except Exception as exc:
        raise StoreFormatError(
            f"{str(path)!r} is not a complete graph store "
            f"(corrupt or truncated?): {type(exc).__name__}: {exc}"
        ) from exc


def _check_version(path: Path, attrs: Any) -> None:
    """Raise `StoreFormatError` unless ``attrs`` are a format-2 store's (format 1: naming the
    conversion command)."""
    fmt = attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != STORE_FORMAT:
        raise StoreFormatError(
            f"{str(path)!r} is not a graphbatch graph store (format attribute {fmt!r})"
        )
    version = attrs.get("format_version", -1)
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
    if _attr_count(attrs, "header_crc") != _header_crc(attrs):
        raise StoreFormatError(
            f"{str(path)!r}: the header attributes do not match their checksum (damaged file)"
        )


def _parse_v2(path: Path, f: Any) -> StoreHeader:
    """The `StoreHeader` of the open format-2 file ``f`` (version and header CRC checked)."""
    attrs = f.attrs
    n_graph = _attr_count(attrs, "n_graph")
    totals = {
        "node": _attr_count(attrs, "n_node_total"),
        "edge": _attr_count(attrs, "n_edge_total"),
        "graph": n_graph,
    }
    fields = check_fields(json.loads(_attr_str(attrs, "fields")))
    meta = json.loads(_attr_str(attrs, "meta"))
    if not isinstance(meta, dict):
        raise InputTypeError("meta is not a JSON object")
    checksums = json.loads(_attr_str(attrs, "checksums"))
    edge_dtype = check_dtype(_attr_str(attrs, "edge_index_dtype"))
    if edge_dtype.kind not in "iu":
        raise InputError(f"edge_index dtype {edge_dtype} is not an integer type")
    expected = expected_arrays(n_graph, totals, fields, edge_dtype)
    layout = _dataset_layout(path, f, expected, checksums)
    return StoreHeader(
        uuid=_attr_str(attrs, "uuid"),
        name=_attr_str(attrs, "name"),
        n_graph=n_graph,
        totals=totals,
        fields=fields,
        meta=meta,
        checksums={k: checksums[k] for k in layout},
        edge_dtype=edge_dtype,
        layout=layout,
        header_crc=_attr_count(attrs, "header_crc"),
        format_version=2,
    )


def _dataset_layout(
    path: Path, f: Any, expected: dict[str, tuple[tuple, np.dtype]], checksums: dict
) -> dict[str, tuple[int | None, tuple, np.dtype]]:
    """Where each array of ``expected`` (and ``failed_index``) lies in the file: ``{where:
    (file offset or None when empty, shape, dtype)}``, after checking that each is a
    contiguous, uncompressed dataset of the expected shape and dtype, inside the file, with
    a checksum in ``checksums``."""
    size = path.stat().st_size
    layout = {}
    for where in [*expected, "failed_index"]:
        ds = f[where]
        if not isinstance(ds, h5py_module().Dataset):
            raise InputError(f"{where} is not a dataset")
        if where == "failed_index":
            if ds.ndim != 1 or ds.shape[0] > MAX_COUNT:
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
    return layout
