"""The manifest of a sharded graph store: one JSON file naming the shard stores and holding the
combined size table, written last and atomically by the build.

Format ``graphbatch-sharded-store``, version `MANIFEST_VERSION` = 1 (a JSON object)::

    format, format_version   "graphbatch-sharded-store", 1
    uuid                     random id of this sharded store (new per build)
    name, meta               dataset name and metadata (as in each shard store's header)
    fields, edge_index_dtype the shards' field table and edge index dtype (all shards equal)
    n_graph, n_node_total, n_edge_total
    build                    build options (dataset, limit, shards, engine, workers, ...)
    shards                   [{file, n_graph, n_node, n_edge, n_failed, uuid, header_crc, bytes}]
                             (a partition whose every record failed has no shard file)
                             ``file`` is relative to the manifest's folder; ``uuid`` and
                             ``header_crc`` are the shard store's (a replaced or re-written
                             shard has another uuid); ``bytes`` its file size
    sizes                    combined size table in global graph order: int64 ``n_node`` and
                             ``n_edge`` as base64 of zlib-compressed little-endian bytes, and
                             ``crc32`` of the uncompressed bytes of each
    failed_without_shard     sorted source indices of the records of those partitions
    manifest_crc             CRC-32 of the canonical JSON (sorted keys) of everything else

Reading checks the format, the version, ``manifest_crc`` (an edited manifest is refused), the
shard entries' types, that each shard file exists with its recorded size (``stat`` only; no
shard is opened) and can hold its graphs, ``fields`` and ``edge_index_dtype`` against the
store format (known levels, bool/int/float dtypes, an integer edge index: a forged ``<f8``
with a recomputed ``manifest_crc`` is refused), and the size table against its CRCs and the
shard counts -- decompressed only up to the length the manifest declares, which the shard
files bound. The file is read only if regular, at most `MAX_MANIFEST_BYTES`, its JSON
nesting bounded. No pickled object is written or read.
"""

from __future__ import annotations

import json
import os
import stat
import uuid as uuidlib
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from .._errors import InputError, StoreFormatError
from .._io import atomic_write, parse_json, read_bounded
from ._header import check_dtype, check_fields, sniff
from ._manifest_format import (
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    MAX_COUNT,
    MAX_MANIFEST_BYTES,
    MIN_GRAPH_BYTES,
    Manifest,
    ShardEntry,
    decode_counts,
    encode_counts,
)
from ._store import GraphStore

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "Manifest",
    "ShardEntry",
    "ShardFacts",
    "file_identity",
    "is_manifest",
    "read_manifest",
    "shard_facts",
    "write_manifest",
    "write_manifest_of_facts",
    "write_manifest_of_shards",
]


def _body_crc(body: dict) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def write_manifest(
    path: str | os.PathLike,
    *,
    uuid: str,
    name: str,
    meta: dict,
    fields: dict,
    edge_index_dtype: str,
    build: dict,
    shards: list[ShardEntry],
    n_node: np.ndarray,
    n_edge: np.ndarray,
    failed_without_shard: Sequence[int] = (),
) -> Path:
    """Write the manifest atomically (`graphbatch._io.atomic_write`: temporary file in the same
    folder, fsync, rename)."""
    path = Path(path)
    n_node = np.asarray(n_node, dtype=np.int64)
    n_edge = np.asarray(n_edge, dtype=np.int64)
    if n_node.shape != n_edge.shape or n_node.shape[0] != sum(s.n_graph for s in shards):
        raise InputError(
            f"size table of {n_node.shape[0]} graphs does not match the shards' "
            f"{sum(s.n_graph for s in shards)}"
        )
    enc_n, crc_n = encode_counts(n_node)
    enc_e, crc_e = encode_counts(n_edge)
    body = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "uuid": uuid,
        "name": name,
        "meta": meta,
        "fields": fields,
        "edge_index_dtype": edge_index_dtype,
        "n_graph": int(n_node.shape[0]),
        "n_node_total": int(n_node.sum()),
        "n_edge_total": int(n_edge.sum()),
        "build": build,
        "shards": [s.as_json() for s in shards],
        "failed_without_shard": sorted(int(i) for i in failed_without_shard),
        "sizes": {
            "encoding": "zlib+base64",
            "dtype": "<i8",
            "n_node": enc_n,
            "n_node_crc32": crc_n,
            "n_edge": enc_e,
            "n_edge_crc32": crc_e,
        },
    }
    body["manifest_crc"] = _body_crc(body)
    data = json.dumps(body, indent=1, sort_keys=True).encode("utf-8")

    def write(fh: IO[bytes]) -> None:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())  # the manifest marks the set complete: on disk before the rename

    atomic_write(path, write)
    return path


@dataclass(frozen=True)
class ShardFacts:
    """What a manifest records of one shard store, read by `shard_facts` (in a sharded build:
    by the shard's writer, on its worker, right after writing it). ``path``: the shard file;
    ``identity``: its ``(st_dev, st_ino, st_size, st_mtime_ns)`` when read -- a file replaced
    since (a new rename, even of equal size) has another inode or time."""

    path: str
    entry: ShardEntry
    fields: dict
    edge_index_dtype: str
    n_node: np.ndarray
    n_edge: np.ndarray
    identity: tuple


def is_manifest(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a JSON file (a sharded store's manifest) rather than a store file
    (never blocks: a FIFO or device is not a manifest, and the store's own open refuses it)."""
    try:
        return sniff(Path(path)) == "json"
    except (OSError, ValueError, TypeError):
        return False  # a missing or non-regular file is reported by the store's own open


def file_identity(path: str | os.PathLike) -> tuple:
    """``(st_dev, st_ino, st_size, st_mtime_ns)`` of the file at ``path``."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def shard_facts(shard_path: str | os.PathLike) -> ShardFacts:
    """Open the store at ``shard_path`` (its own open checks: header CRC, size and offset
    CRCs) and return what the manifest needs of it. Raises ``ValueError`` if the file changed
    while it was read."""
    shard_path = Path(shard_path)
    before = file_identity(shard_path)
    with GraphStore(shard_path, cache_size=0) as store:
        n_node, n_edge = np.array(store.n_node), np.array(store.n_edge)
        facts = ShardFacts(
            path=str(shard_path),
            entry=ShardEntry(
                file=shard_path.name,
                n_graph=int(n_node.shape[0]),
                n_node=int(n_node.sum()),
                n_edge=int(n_edge.sum()),
                n_failed=int(store.failed_index.shape[0]),
                uuid=store.uuid,
                header_crc=store.header_crc,
                bytes=before[2],
            ),
            fields=store.fields,
            edge_index_dtype=np.dtype(store.packed().edge_index.dtype).str,
            n_node=n_node,
            n_edge=n_edge,
            identity=before,
        )
    if file_identity(shard_path) != before:
        raise InputError(f"shard {shard_path.name} changed on disk while it was read")
    return facts


def write_manifest_of_facts(
    path: str | os.PathLike,
    facts: list[ShardFacts],
    *,
    name: str,
    meta: dict,
    build: dict,
    failed_without_shard: Sequence[int] = (),
) -> list[ShardEntry]:
    """Write the manifest at ``path`` from the shards' `ShardFacts` (global order) without
    opening any shard: checks that every shard lies in the manifest's folder, that each file on
    disk is still the one its facts were read from (`file_identity`; otherwise "written
    twice?"), and that the shards agree (fields, edge dtype). Returns the entries. Raises
    ``ValueError`` naming the first shard that does not fit."""
    path = Path(path)
    directory = (path.parent if str(path.parent) else Path(".")).resolve()
    if not facts:
        raise InputError("a sharded store needs at least one shard")
    first = facts[0]
    for k, f in enumerate(facts):
        shard_path = Path(f.path)
        if shard_path.resolve().parent != directory:
            raise InputError(
                f"shard {str(shard_path)!r} is not in the manifest's folder {str(directory)!r}"
            )
        try:
            now = file_identity(shard_path)
        except FileNotFoundError:
            raise InputError(f"shard {k} ({shard_path.name}) is gone from disk") from None
        if now != tuple(f.identity):
            raise InputError(
                f"shard {k} ({shard_path.name}) on disk is not the store its "
                f"writer reported (file {now}, reported {tuple(f.identity)}): "
                "written twice?"
            )
        if f.fields != first.fields or f.edge_index_dtype != first.edge_index_dtype:
            raise InputError(
                f"shard {k} ({shard_path.name}) has fields {f.fields} and edge "
                f"dtype {f.edge_index_dtype}; shard 0 has {first.fields} and "
                f"{first.edge_index_dtype}"
            )
    entries = [f.entry for f in facts]
    write_manifest(
        path,
        uuid=uuidlib.uuid4().hex,
        name=name,
        meta=meta,
        fields=first.fields,
        edge_index_dtype=first.edge_index_dtype,
        build=build,
        shards=entries,
        n_node=np.concatenate([f.n_node for f in facts]),
        n_edge=np.concatenate([f.n_edge for f in facts]),
        failed_without_shard=failed_without_shard,
    )
    return entries


def write_manifest_of_shards(
    path: str | os.PathLike,
    shard_paths: Sequence[str | os.PathLike],
    *,
    name: str,
    meta: dict,
    build: dict,
    failed_without_shard: Sequence[int] = (),
) -> list[ShardEntry]:
    """Open every shard store (in global order; each in the manifest's folder) and write the
    manifest at ``path`` with their entries and combined size table (`shard_facts`, then
    `write_manifest_of_facts`). Returns the entries."""
    path = Path(path)
    directory = (path.parent if str(path.parent) else Path(".")).resolve()
    for shard_path in map(Path, shard_paths):  # named before any file is opened
        if shard_path.resolve().parent != directory:
            raise InputError(
                f"shard {str(shard_path)!r} is not in the manifest's folder {str(directory)!r}"
            )
    return write_manifest_of_facts(
        path,
        [shard_facts(p) for p in shard_paths],
        name=name,
        meta=meta,
        build=build,
        failed_without_shard=failed_without_shard,
    )


def _count(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise InputError(f"{what} = {value!r} is not a count")
    return value


def _shard(entry: object, k: int) -> ShardEntry:
    if not isinstance(entry, dict):
        raise InputError(f"shard {k} is not a JSON object")
    file = entry.get("file")
    if not isinstance(file, str) or not file or "/" in file or "\\" in file or file in (".", ".."):
        raise InputError(
            f"shard {k} has a bad file name {file!r} (must be a plain name in the "
            "manifest's folder)"
        )
    uuid = entry.get("uuid")
    if not isinstance(uuid, str):
        raise InputError(f"shard {k} has no uuid")
    return ShardEntry(
        file=file,
        uuid=uuid,
        **{
            key: _count(entry.get(key), f"shard {k} {key}")
            for key in ("n_graph", "n_node", "n_edge", "n_failed", "header_crc", "bytes")
        },
    )


def _check_shard_files(path: Path, entries: Iterable[ShardEntry]) -> None:
    """Every shard file exists, is a regular file of the recorded size, and that size can hold
    the graphs the entry claims (>= `MIN_GRAPH_BYTES` each): so the size table's declared
    length is bounded by real files before it is decompressed."""
    for e in entries:
        shard = path.parent / e.file
        try:
            st = os.stat(shard)
        except FileNotFoundError:
            raise StoreFormatError(
                f"{str(path)!r}: shard {str(shard)!r} is missing "
                "(incomplete or moved sharded store)"
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise StoreFormatError(f"{str(path)!r}: shard {str(shard)!r} is not a regular file")
        if st.st_size != e.bytes:
            raise StoreFormatError(
                f"{str(path)!r}: shard {str(shard)!r} has {st.st_size} "
                f"bytes, the manifest says {e.bytes} (replaced or damaged "
                "shard)"
            )
        if e.n_graph * MIN_GRAPH_BYTES > e.bytes:
            raise StoreFormatError(
                f"{str(path)!r}: shard {str(shard)!r} of {e.bytes:,} bytes "
                f"cannot hold the {e.n_graph:,} graphs the manifest says "
                f"(at least {MIN_GRAPH_BYTES} bytes each)"
            )


def _check_format(body: dict) -> tuple[dict, str]:
    """``fields`` and ``edge_index_dtype`` as the store format allows them (the same checks as
    a store header: known levels, bool/int/float dtypes, an integer edge index)."""
    fields = check_fields(body["fields"])
    edge = check_dtype(body["edge_index_dtype"])
    if edge.kind not in "iu" or edge.str != body["edge_index_dtype"]:
        raise InputError(
            f"edge_index_dtype {body['edge_index_dtype']!r} is not an integer dtype string"
        )
    return fields, edge.str


def read_manifest(path: str | os.PathLike) -> Manifest:
    """Parse and check the manifest at ``path`` (no shard is opened: each shard file is only
    stat-ed, and must have its recorded size); raises `StoreFormatError` naming the file if it
    is not a complete, unedited manifest. Reads at most `MAX_MANIFEST_BYTES`, JSON nesting
    bounded, the size table decompressed only to the length the shard files can hold."""
    path = Path(path)
    try:
        data = read_bounded(path, "sharded store manifest", MAX_MANIFEST_BYTES)
    except InputError as exc:
        raise StoreFormatError(str(exc)) from None
    try:
        body = parse_json(
            data, f"sharded store manifest {str(path)!r}", max_bytes=MAX_MANIFEST_BYTES
        )
        if not isinstance(body, dict):
            raise InputError("not a JSON object")
        if body.get("format") != MANIFEST_FORMAT:
            raise StoreFormatError(
                f"{str(path)!r} is not a graphbatch sharded store manifest "
                f"(format {body.get('format')!r})"
            )
        if body.get("format_version") != MANIFEST_VERSION:
            raise StoreFormatError(
                f"{str(path)!r} has manifest version "
                f"{body.get('format_version')!r}; this graphbatch reads "
                f"version {MANIFEST_VERSION}"
            )
        crc = body.pop("manifest_crc", None)
        if type(crc) is not int or crc != _body_crc(body):
            raise StoreFormatError(
                f"{str(path)!r}: the manifest does not match its checksum "
                "(edited or damaged manifest)"
            )
        shards = body.get("shards")
        if not isinstance(shards, list) or not shards:
            raise InputError("no shards listed")
        entries = tuple(_shard(e, k) for k, e in enumerate(shards))
        if len({e.file for e in entries}) != len(entries):
            raise InputError("a shard file is listed twice")
        n_graph = _count(body.get("n_graph"), "n_graph")
        if n_graph != sum(e.n_graph for e in entries):
            raise InputError(f"n_graph {n_graph} differs from the shards' sum")
        _check_shard_files(path, entries)
        sizes = body.get("sizes")
        if not isinstance(sizes, dict) or sizes.get("encoding") != "zlib+base64":
            raise InputError("sizes is not a zlib+base64 size table")
        n_node = decode_counts(sizes.get("n_node"), sizes.get("n_node_crc32"), n_graph, "n_node")
        n_edge = decode_counts(sizes.get("n_edge"), sizes.get("n_edge_crc32"), n_graph, "n_edge")
        bounds = np.cumsum([0] + [e.n_graph for e in entries])
        for k, e in enumerate(entries):
            a, b = bounds[k], bounds[k + 1]
            if int(n_node[a:b].sum()) != e.n_node or int(n_edge[a:b].sum()) != e.n_edge:
                raise InputError(f"shard {k} node/edge totals differ from the size table")
        if _count(body.get("n_node_total"), "n_node_total") != int(n_node.sum()) or _count(
            body.get("n_edge_total"), "n_edge_total"
        ) != int(n_edge.sum()):
            raise InputError("totals differ from the size table")
        for key, kind in (
            ("uuid", str),
            ("name", str),
            ("meta", dict),
            ("fields", dict),
            ("edge_index_dtype", str),
            ("build", dict),
        ):
            if not isinstance(body.get(key), kind):
                raise InputError(f"{key} is not a JSON {kind.__name__}")
        _check_format(body)
        extra = body.get("failed_without_shard")
        if not isinstance(extra, list):
            raise InputError("failed_without_shard is not a list")
        failed_extra = np.asarray(
            [_count(i, "failed_without_shard entry") for i in extra], dtype=np.int64
        )
    except StoreFormatError:
        raise
    except Exception as exc:
        raise StoreFormatError(
            f"{str(path)!r} is not a complete sharded store manifest: {type(exc).__name__}: {exc}"
        ) from exc
    return Manifest(
        path=path,
        uuid=body["uuid"],
        name=body["name"],
        meta=body["meta"],
        fields=body["fields"],
        edge_index_dtype=body["edge_index_dtype"],
        build=body["build"],
        shards=entries,
        n_node=n_node,
        n_edge=n_edge,
        failed_without_shard=failed_extra,
    )
