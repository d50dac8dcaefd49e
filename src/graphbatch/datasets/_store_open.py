"""`open_store`: the store at a path, of whichever kind the file is.

A store file (``.h5``) opens as a `GraphStore`; a sharded store's JSON manifest (written by
`graphbatch.datasets.build_sharded_store`) as a `ShardedGraphStore`. The kind is judged by the
file's first bytes, never by its name.
"""

from __future__ import annotations

import os
from typing import TypeAlias

from ._manifest import is_manifest
from ._shards import ShardedGraphStore
from ._store import GraphStore

__all__ = ["AnyStore", "open_store"]

#: What `open_store` returns: either kind of store (both `graphbatch._source.GraphSource`s).
AnyStore: TypeAlias = GraphStore | ShardedGraphStore


def open_store(
    path: str | os.PathLike,
    *,
    cache_size: int = 4096,
    in_memory: bool = False,
    verify: bool = False,
    check_chunks: bool = True,
) -> AnyStore:
    """The store at ``path``: a `ShardedGraphStore` when ``path`` is a JSON manifest (judged by
    its first byte; opening it reads no shard), else a single-file `GraphStore`.

    Options are the stores' own: ``cache_size`` (graphs kept by ``get``/``[i]``),
    ``in_memory`` (read arrays into RAM instead of memory-mapping them), ``verify`` (check
    every array's CRC-32 now: reads the whole store once) and ``check_chunks`` (CRC-check each
    check chunk on its first read). Raises ``FileNotFoundError``, or `StoreFormatError` (an
    `InputError`) naming the file for a damaged or foreign one.
    """
    kind = ShardedGraphStore if is_manifest(path) else GraphStore
    return kind(
        path,
        cache_size=cache_size,
        in_memory=in_memory,
        verify=verify,
        check_chunks=check_chunks,
    )
