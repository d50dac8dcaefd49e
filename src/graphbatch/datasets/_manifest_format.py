"""What a sharded store's manifest holds (`Manifest`, one `ShardEntry` per shard file, the
format's name, version and bounds) and how its size table is encoded: int64 counts as base64 of
zlib-compressed little-endian bytes with the CRC-32 of those bytes (`encode_counts`), decoded
without ever expanding more than the declared length (`decode_counts`). The format is described
in `graphbatch.datasets._manifest`, which reads and writes it."""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._errors import InputError

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "MAX_COUNT",
    "MAX_MANIFEST_BYTES",
    "MIN_GRAPH_BYTES",
    "Manifest",
    "ShardEntry",
    "decode_counts",
    "encode_counts",
]

MANIFEST_FORMAT = "graphbatch-sharded-store"
MANIFEST_VERSION = 1
#: Most graphs, nodes or edges a count in a manifest may state.
MAX_COUNT = 1 << 48
#: Largest manifest file read.
MAX_MANIFEST_BYTES = 1 << 31
#: Fewest bytes a graph takes in a shard store (its two sizes and two offsets, int64 each).
MIN_GRAPH_BYTES = 32


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest records it (``file`` relative to the manifest's folder)."""

    file: str
    n_graph: int
    n_node: int
    n_edge: int
    n_failed: int
    uuid: str
    header_crc: int
    bytes: int

    def as_json(self) -> dict:
        """The entry as the manifest's ``shards`` list holds it."""
        return {
            "file": self.file,
            "n_graph": self.n_graph,
            "n_node": self.n_node,
            "n_edge": self.n_edge,
            "n_failed": self.n_failed,
            "uuid": self.uuid,
            "header_crc": self.header_crc,
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class Manifest:
    """A parsed, checked manifest. ``n_node``/``n_edge``: the combined int64 size table."""

    path: Path
    uuid: str
    name: str
    meta: dict
    fields: dict
    edge_index_dtype: str
    build: dict
    shards: tuple[ShardEntry, ...]
    n_node: np.ndarray
    n_edge: np.ndarray
    failed_without_shard: np.ndarray

    @property
    def n_graph(self) -> int:
        """Graphs in the whole sharded store."""
        return int(self.n_node.shape[0])

    def shard_path(self, s: int) -> Path:
        """Where shard ``s``'s file is (beside the manifest)."""
        return self.path.parent / self.shards[s].file


def encode_counts(arr: np.ndarray) -> tuple[str, int]:
    """``arr`` as int64 little-endian bytes, zlib-compressed, in base64; and the CRC-32 of the
    uncompressed bytes (a ``sizes`` entry of the manifest)."""
    raw = np.ascontiguousarray(arr, dtype="<i8").tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii"), zlib.crc32(raw)


def decode_counts(text: object, crc: object, n: int, what: str) -> np.ndarray:
    """The ``n`` int64 counts of ``sizes/<what>``: never decompresses more than ``8 n + 1``
    bytes (a zlib bomb is refused after that many, not expanded)."""
    if not isinstance(text, str) or type(crc) is not int:
        raise InputError(f"sizes/{what} is not an encoded array with a crc32")
    d = zlib.decompressobj()
    raw = d.decompress(base64.b64decode(text.encode("ascii"), validate=True), 8 * n + 1)
    if len(raw) > 8 * n or d.unconsumed_tail:
        raise InputError(
            f"sizes/{what} holds more than the {n} values the manifest says "
            f"(over {8 * n:,} bytes once decompressed)"
        )
    if len(raw) != 8 * n:
        raise InputError(f"sizes/{what} holds {len(raw) // 8} values, the manifest says {n}")
    if zlib.crc32(raw) != crc:
        raise InputError(f"sizes/{what} does not match its crc32")
    arr = np.frombuffer(raw, dtype="<i8").astype(np.int64)
    if arr.size and arr.min() < 0:
        raise InputError(f"sizes/{what} holds negative counts")
    arr.flags.writeable = False
    return arr
