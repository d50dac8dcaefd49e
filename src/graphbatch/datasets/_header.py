"""The graph store's header (format 3): a fixed prefix in the HDF5 userblock and a JSON header,
both read and CRC-checked with plain file reads -- h5py never parses a store on the read path.

Format 2 kept its header in HDF5 attributes. HDF5 stores variable-length strings in its global
heap, which has no checksum, and its heap parser (``H5HG__cache_heap_deserialize``) loops
forever when a damaged object size makes the next object header land on zero bytes (an
object 0 of size 0 never advances the cursor): one flipped byte made ``GraphStore(path)`` hang
inside an attribute read. Format 3 therefore reads nothing through HDF5: the HDF5 file is the
container (h5py and ``h5dump`` still read every array), but a reader finds everything from
the prefix:

``bytes 0..511`` (the HDF5 userblock, which HDF5 skips; its superblock starts at 512)::

    0   8  magic           b"\\x89GBSTORE"
    8   4  format_version  uint32 little-endian (3)
    12  4  reserved        0
    16  8  header_offset   uint64: file offset of the JSON header (the bytes of the uint8
                           dataset ``/header``)
    24  8  header_length   uint64: its length in bytes (at most `MAX_HEADER_BYTES`)
    32  4  header_crc32    CRC-32 of those bytes
    36  4  prefix_crc32    CRC-32 of bytes 0..35
    40..511                zero

The JSON header (UTF-8, an object) holds ``format``, ``format_version``, ``uuid``, ``name``,
``meta``, ``n_graph``, ``n_node_total``, ``n_edge_total``, ``edge_index_dtype``, ``fields``,
``arrays`` -- for every dataset its ``offset`` (absolute file offset, ``null`` when empty),
``shape``, ``dtype`` and ``crc32`` (of all its bytes) -- and ``chunks``: ``count``,
``target_bytes`` and ``arrays`` (the columns of the per-chunk CRC table,
`graphbatch.datasets._chunkcheck`). Parsing checks the prefix CRC, the header's bounds and
CRC, JSON size and nesting, every count, field description and dtype, that every array has
exactly the shape and dtype the counts imply, and that the arrays lie inside the file without
overlapping each other, the header or the prefix.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from .._errors import InputError, InputTypeError
from .._io import open_regular, parse_json
from ._graphs import LEVELS

__all__ = [
    "BLOCK_BYTES",
    "HDF5_SIGNATURE",
    "MAX_COUNT",
    "MAX_HEADER_BYTES",
    "PREFIX_BYTES",
    "PREFIX_MAGIC",
    "STORE_FORMAT",
    "STORE_VERSION",
    "StoreHeader",
    "array_crc32",
    "check_dtype",
    "check_fields",
    "expected_arrays",
    "h5py_module",
    "pack_prefix",
    "read_header_v3",
    "sniff",
    "streamed_crc32",
]

STORE_FORMAT = "graphbatch-graph-store"
#: The format this graphbatch writes. It reads 3 directly and 2 through a time-bounded child
#: process (`graphbatch.datasets._h5probe`); version 1 only converts (`data convert`).
STORE_VERSION = 3
PREFIX_BYTES = 512  # the HDF5 userblock: a power of two >= 512
PREFIX_MAGIC = b"\x89GBSTORE"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
MAX_HEADER_BYTES = 1 << 28  # 256 MiB of header JSON (meta of huge code stores included)
MAX_COUNT = 1 << 48  # no store holds more rows than this
_PREFIX = struct.Struct("<8sIIQQI")  # magic, version, reserved, offset, length, header crc
BLOCK_BYTES = 1 << 25  # 32 MiB: the streaming unit of writes and whole-array checksums

#: Arrays checked whole on open (small: one entry per graph or per chunk).
SMALL_ARRAYS = (
    "sizes/n_node",
    "sizes/n_edge",
    "offsets/node",
    "offsets/edge",
    "failed_index",
    "checks/chunk_graphs",
    "checks/chunk_crc32",
)


def h5py_module() -> ModuleType:
    """The ``h5py`` module (the container library of every store file; the ``data`` extra),
    imported on first use."""
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - h5py is in the data extra
        raise ImportError("the graph store needs h5py: pip install 'graphbatch[data]'") from exc
    return h5py


def array_crc32(arr: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of a C-contiguous array's bytes, chained on ``crc``."""
    return zlib.crc32(arr, crc)  # type: ignore[arg-type]  # a buffer (NumPy stubs: 3.12+)


def streamed_crc32(arr: np.ndarray) -> int:
    """CRC-32 of any array's bytes in C order, `BLOCK_BYTES` at a time (a memory map is read
    once, never copied whole): the ``crc32`` the header records for it."""
    flat = arr.reshape(-1)
    step = max(1, BLOCK_BYTES // max(1, arr.dtype.itemsize))
    crc = 0
    for s in range(0, flat.shape[0], step):
        crc = array_crc32(np.ascontiguousarray(flat[s : s + step]), crc)
    return crc


class _FormatError(InputError):
    """Raised inside parsing; the store turns it into `StoreFormatError` naming the file."""


@dataclass(frozen=True)
class StoreHeader:
    """What a reader needs of a store, from its header: counts per level (``totals``),
    fields, metadata, the CRC-32 of every array (``checksums``) and where it lies
    (``layout``: dataset path -> (file offset or None, shape, dtype)). ``header_crc``: CRC-32
    of the header (format 3: of the JSON bytes; format 2: of its attributes). ``chunk_arrays``:
    the columns of the per-chunk CRC table (empty for format 2, which has none)."""

    uuid: str
    name: str
    n_graph: int
    totals: dict
    fields: dict
    meta: dict
    checksums: dict
    edge_dtype: np.dtype
    layout: dict
    header_crc: int = 0
    format_version: int = STORE_VERSION
    chunk_arrays: tuple = field(default=())


def check_dtype(text: object) -> np.dtype:
    """A stored array dtype: bool, int, uint or float of at most 8 bytes, no structure."""
    dt = np.dtype(str(text))
    if dt.kind not in "biuf" or dt.itemsize > 8 or dt.shape or dt.names:
        raise InputError(f"unsupported dtype {text!r}")
    return dt


def check_fields(fields: object) -> dict:
    """The ``fields`` table: ``{name: {level, dtype, shape}}`` with known levels, dtypes
    (`check_dtype`), bounded trailing shapes, plain names."""
    if not isinstance(fields, dict):
        raise InputTypeError("fields is not a JSON object")
    for name, spec in fields.items():
        if (
            not isinstance(spec, dict)
            or spec.get("level") not in LEVELS
            or not isinstance(spec.get("shape"), list)
            or len(spec["shape"]) > 8
            or not all(type(s) is int and 0 <= s <= MAX_COUNT for s in spec["shape"])
            or name == "edge_index"
            or "/" in name
            or not name
        ):
            raise InputError(f"bad field description {name!r}: {spec!r}")
        check_dtype(spec.get("dtype"))
    return fields


def expected_arrays(
    n_graph: int, totals: dict, fields: dict, edge_dtype: np.dtype
) -> dict[str, tuple[tuple, np.dtype]]:
    """The shape and dtype every graph array must have, from the header's counts (without
    ``failed_index``, whose length is free, and the check tables)."""
    out = {
        "sizes/n_node": ((n_graph,), np.dtype("<i8")),
        "sizes/n_edge": ((n_graph,), np.dtype("<i8")),
        "offsets/node": ((n_graph + 1,), np.dtype("<i8")),
        "offsets/edge": ((n_graph + 1,), np.dtype("<i8")),
        "edge_index": ((2, totals["edge"]), edge_dtype),
    }
    for name, spec in fields.items():
        out[f"{spec['level']}/{name}"] = (
            (totals[spec["level"]], *spec["shape"]),
            check_dtype(spec["dtype"]),
        )
    return out


def chunk_columns(fields: dict) -> list[str]:
    """The data arrays with per-chunk CRCs, in table column order: ``edge_index``, then every
    field in the header's field order."""
    return ["edge_index", *(f"{spec['level']}/{name}" for name, spec in fields.items())]


def pack_prefix(header_offset: int, header_length: int, header_crc: int) -> bytes:
    """The `PREFIX_BYTES` bytes of the userblock (module docstring)."""
    head = _PREFIX.pack(PREFIX_MAGIC, STORE_VERSION, 0, header_offset, header_length, header_crc)
    head += struct.pack("<I", zlib.crc32(head))
    return head + bytes(PREFIX_BYTES - len(head))


def sniff(path: Path) -> str:
    """What the regular file ``path`` starts with: ``"v3"`` (a format-3 store's prefix),
    ``"hdf5"`` (an HDF5 file without userblock: a format-1/2 store, or another file),
    ``"json"`` (a sharded store's manifest) or ``"other"``. Raises ``FileNotFoundError`` /
    `graphbatch.InputError` for a missing or non-regular file (never blocks on a FIFO)."""
    with open_regular(path, "graph store") as fh:
        head = fh.read(64)
    if head[:8] == PREFIX_MAGIC:
        return "v3"
    if head[:8] == HDF5_SIGNATURE:
        return "hdf5"
    if head.lstrip()[:1] == b"{":
        return "json"
    return "other"


def _count(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise _FormatError(f"{what} = {value!r} is not a count")
    return value


def read_header_v3(path: Path) -> StoreHeader:
    """Read and check the prefix and JSON header of the format-3 store at ``path`` (plain
    file reads; no HDF5). Raises ``_FormatError`` (a ``ValueError``) describing the first
    problem; the caller names the file."""
    with open_regular(path, "graph store") as fh:
        size = os.fstat(fh.fileno()).st_size
        raw = fh.read(PREFIX_BYTES)
        if len(raw) < PREFIX_BYTES:
            raise _FormatError(
                f"truncated: {len(raw)} bytes, shorter than the {PREFIX_BYTES}-byte prefix"
            )
        _, version, _, offset, length, crc = _PREFIX.unpack_from(raw)
        (prefix_crc,) = struct.unpack_from("<I", raw, _PREFIX.size)
        if zlib.crc32(raw[: _PREFIX.size]) != prefix_crc:
            raise _FormatError("the store prefix does not match its checksum (damaged file)")
        if version != STORE_VERSION:
            raise _FormatError(
                f"store format version {version}; this graphbatch reads "
                f"versions 2 and {STORE_VERSION}"
            )
        if not (
            offset >= PREFIX_BYTES and 2 <= length <= MAX_HEADER_BYTES and offset + length <= size
        ):
            raise _FormatError(
                f"the header ({length:,} bytes at offset {offset:,}) lies "
                f"outside the {size:,}-byte file or over the limit of "
                f"{MAX_HEADER_BYTES:,} bytes (truncated?)"
            )
        fh.seek(offset)
        blob = fh.read(length)
    if len(blob) != length:
        raise _FormatError("truncated while reading the header")
    if zlib.crc32(blob) != crc:
        raise _FormatError("the header does not match its checksum (damaged file)")
    body = parse_json(blob, "the store header", max_bytes=MAX_HEADER_BYTES)
    return _parse_body(body, size, (offset, length), crc)


def _parse_body(body: object, size: int, header_span: tuple[int, int], crc: int) -> StoreHeader:
    if not isinstance(body, dict):
        raise _FormatError("the header is not a JSON object")
    if body.get("format") != STORE_FORMAT or body.get("format_version") != STORE_VERSION:
        raise _FormatError(
            f"the header names format {body.get('format')!r} version {body.get('format_version')!r}"
        )
    uuid, name, meta = body.get("uuid"), body.get("name"), body.get("meta")
    if not (
        isinstance(uuid, str)
        and 0 < len(uuid) <= 64
        and isinstance(name, str)
        and isinstance(meta, dict)
    ):
        raise _FormatError("uuid, name or meta is missing or of the wrong type")
    n_graph = _count(body.get("n_graph"), "n_graph")
    totals = {
        "node": _count(body.get("n_node_total"), "n_node_total"),
        "edge": _count(body.get("n_edge_total"), "n_edge_total"),
        "graph": n_graph,
    }
    try:
        fields = check_fields(body.get("fields"))
        edge_dtype = check_dtype(body.get("edge_index_dtype"))
    except (TypeError, ValueError) as exc:
        raise _FormatError(str(exc)) from None
    if edge_dtype.kind not in "iu":
        raise _FormatError(f"edge_index dtype {edge_dtype} is not an integer type")
    chunks = body.get("chunks")
    if not isinstance(chunks, dict):
        raise _FormatError("the header has no chunk table description")
    n_chunks = _count(chunks.get("count"), "chunks.count")
    columns = chunk_columns(fields)
    if chunks.get("arrays") != columns:
        raise _FormatError(
            f"chunk table columns {chunks.get('arrays')!r} differ from the data arrays {columns}"
        )
    if (n_chunks == 0) != (n_graph == 0) or n_chunks > n_graph:
        raise _FormatError(f"{n_chunks} check chunks for {n_graph} graphs")
    expected = expected_arrays(n_graph, totals, fields, edge_dtype)
    expected["checks/chunk_graphs"] = ((n_chunks + 1,), np.dtype("<i8"))
    expected["checks/chunk_crc32"] = ((n_chunks, len(columns)), np.dtype("<u4"))
    arrays = body.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != {*expected, "failed_index"}:
        have = sorted(arrays) if isinstance(arrays, dict) else arrays
        raise _FormatError(
            f"the header lists arrays {have!r}, not {sorted({*expected, 'failed_index'})}"
        )
    layout, checksums = _array_layout(arrays, expected, size, header_span)
    return StoreHeader(
        uuid=uuid,
        name=name,
        n_graph=n_graph,
        totals=totals,
        fields=fields,
        meta=meta,
        checksums=checksums,
        edge_dtype=edge_dtype,
        layout=layout,
        header_crc=crc,
        format_version=STORE_VERSION,
        chunk_arrays=tuple(columns),
    )


def _array_layout(
    arrays: dict, expected: dict[str, tuple[tuple, np.dtype]], size: int, header_span: tuple
) -> tuple[dict, dict]:
    """``(layout, checksums)`` of the header's ``arrays`` descriptions: each array's shape and
    dtype as the counts require (``expected``; ``failed_index`` of any length), a CRC-32, and
    bytes inside the ``size``-byte file, overlapping neither each other nor the header
    (``header_span``: its offset and length)."""
    layout, checksums, spans = {}, {}, [header_span]
    for where, entry in arrays.items():
        if not isinstance(entry, dict):
            raise _FormatError(f"array {where} has no description")
        if where == "failed_index":
            shape_list = entry.get("shape")
            if not (isinstance(shape_list, list) and len(shape_list) == 1):
                raise _FormatError(f"failed_index has shape {shape_list!r}")
            want = ((_count(shape_list[0], "failed_index length"),), np.dtype("<i8"))
        else:
            want = expected[where]
        if entry.get("shape") != list(want[0]) or entry.get("dtype") != want[1].str:
            raise _FormatError(
                f"{where} is described as {entry.get('shape')} "
                f"{entry.get('dtype')}; the counts require {list(want[0])} "
                f"{want[1].str}"
            )
        entry_crc = entry.get("crc32")
        if type(entry_crc) is not int or not 0 <= entry_crc < 1 << 32:
            raise _FormatError(f"no checksum for {where}")
        nbytes = int(np.prod(want[0], dtype=np.int64)) * want[1].itemsize
        offset = entry.get("offset")
        if nbytes == 0:
            offset = None
        elif type(offset) is not int or offset < PREFIX_BYTES or offset + nbytes > size:
            raise _FormatError(
                f"{where} ({nbytes:,} bytes at offset {offset!r}) lies outside "
                f"the {size:,}-byte file"
            )
        else:
            spans.append((offset, nbytes))
        layout[where] = (offset, want[0], want[1])
        checksums[where] = entry_crc
    spans.sort()
    for (a, la), (b, _) in itertools.pairwise(spans):
        if a + la > b:
            raise _FormatError(f"arrays overlap at file offset {b:,} (damaged header)")
    return layout, checksums


def header_json(
    *,
    uuid: str,
    name: str,
    meta: dict,
    n_graph: int,
    totals: dict,
    fields: dict,
    edge_dtype: np.dtype,
    arrays: dict,
    n_chunks: int,
    target_bytes: int,
) -> bytes:
    """The JSON header's bytes (module docstring); ``arrays``: ``{where: (offset, shape,
    dtype, crc32)}``."""
    body = {
        "format": STORE_FORMAT,
        "format_version": STORE_VERSION,
        "uuid": uuid,
        "name": name,
        "meta": meta,
        "n_graph": n_graph,
        "n_node_total": totals["node"],
        "n_edge_total": totals["edge"],
        "edge_index_dtype": np.dtype(edge_dtype).str,
        "fields": fields,
        "arrays": {
            w: {"offset": o, "shape": list(s), "dtype": np.dtype(d).str, "crc32": c}
            for w, (o, s, d, c) in arrays.items()
        },
        "chunks": {
            "count": n_chunks,
            "target_bytes": target_bytes,
            "arrays": chunk_columns(fields),
        },
    }
    return json.dumps(body, sort_keys=False).encode("utf-8")
