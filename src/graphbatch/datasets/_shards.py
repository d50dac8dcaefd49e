"""A sharded graph store read as one store: `ShardedGraphStore` (what
`graphbatch.datasets.open_store` returns for a manifest written by
`graphbatch.datasets.build_sharded_store`), a `graphbatch._source.GraphSource` beside the
single-file `GraphStore` (both on `graphbatch.datasets._store_base.StoreBase`).

Graph ``i`` of the set is graph ``i - start[s]`` of shard ``s``, where ``start`` are the
cumulative shard graph counts (shards in manifest order). Sizes come from the manifest alone:
``len``, ``n_node``/``n_edge`` and ``graph_sizes()`` (all a planner reads) open no shard. A shard
is opened on its first data read and checked then against its manifest entry (uuid, header
CRC, graph count, fields, per-graph sizes); opening the manifest only checks that every shard
file exists with the recorded byte size. `verify` checks everything, every shard's data CRCs
included.

Batch reads: `read_batch` gathers each shard's graphs through that shard's own
``GraphStore.read_batch`` (a tight shape, jraph layout, stored dtypes: only the real rows are
used), puts them in one small in-memory `PackedGraphs` and pads it with the kernel
`graphbatch._padbatch.pad_batch`, restoring the batch order and global ``graph_index``: the
result equals a single-file store's ``read_batch`` of the same graphs, bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._budget import Budget
from .._errors import InputError, StoreFormatError
from .._padbatch import PackedGraphs, PaddedArrays, _index, pad_batch
from ._graphs import LEVELS, GraphArrays
from ._manifest import Manifest, read_manifest
from ._store import GraphStore
from ._store_base import StoreBase

__all__ = ["ShardedGraphStore"]


class ShardedGraphStore(StoreBase):
    """The shards listed by a manifest, read as one store with global graph indices.

    Open it with ``open_store(manifest_path)`` (or this class). Options as for `GraphStore`
    (``in_memory`` and the identity checks apply per shard; ``cache_size`` is the LRU cache of
    this object). ``path`` is the manifest, ``uuid`` the manifest's id. It has no single set of
    arrays, so no ``packed()``: read batches with `read_batch`, or a shard's arrays through
    ``shard(s)``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        cache_size: int = 4096,
        in_memory: bool = False,
        verify: bool = False,
        check_chunks: bool = True,
    ) -> None:
        super().__init__(path, cache_size, in_memory, check_chunks)
        manifest = read_manifest(self.path)
        self._manifest: Manifest = manifest
        self.uuid = manifest.uuid
        self.name = manifest.name
        self.fields = manifest.fields
        self.meta = manifest.meta
        self.build: dict = manifest.build
        self._starts = np.concatenate(
            [[0], np.cumsum([e.n_graph for e in manifest.shards])]
        ).astype(np.int64)
        self._node_offsets: np.ndarray | None = None
        self._edge_offsets: np.ndarray | None = None
        self._shards: list[GraphStore | None] = [None] * len(manifest.shards)
        self.edge_index_dtype = np.dtype(manifest.edge_index_dtype)
        # (read_manifest has stat-ed every shard: present, regular, of the recorded size)
        if verify:
            self.verify()

    # ------------------------------------------------------------ shards
    @property
    def n_shards(self) -> int:
        return len(self._shards)

    @property
    def shard_paths(self) -> list[Path]:
        """The shard store files, in global graph order."""
        return [self._manifest.shard_path(s) for s in range(self.n_shards)]

    @property
    def shard_starts(self) -> np.ndarray:
        """int64 ``[S + 1]``: shard ``s`` holds global graphs ``starts[s]:starts[s+1]``."""
        return self._starts

    def shard(self, s: int) -> GraphStore:
        """Shard ``s`` as a `GraphStore`, opened once and checked against the manifest."""
        store = self._shards[s]
        if store is None:
            store = self._shards[s] = self._open_shard(s)
        return store

    def _open_shard(self, s: int) -> GraphStore:
        entry = self._manifest.shards[s]
        path = self._manifest.shard_path(s)
        where = f"{str(self.path)!r}: shard {str(path)!r}"
        try:
            store = GraphStore(
                path, cache_size=0, in_memory=self.in_memory, check_chunks=self.check_chunks
            )
        except FileNotFoundError:
            raise StoreFormatError(
                f"{where} is missing (incomplete or moved sharded store)"
            ) from None
        except StoreFormatError as exc:
            raise StoreFormatError(f"{where} is damaged: {exc}") from exc
        if store.uuid != entry.uuid or store.header_crc != entry.header_crc:
            raise StoreFormatError(
                f"{where} is not the shard this manifest was built with "
                f"(store id {store.uuid}, expected {entry.uuid}): replaced "
                "shard"
            )
        a, b = self._starts[s], self._starts[s + 1]
        if (
            len(store) != entry.n_graph
            or store.fields != self.fields
            or store.edge_index_dtype != self.edge_index_dtype
            or not np.array_equal(store.n_node, self._manifest.n_node[a:b])
            or not np.array_equal(store.n_edge, self._manifest.n_edge[a:b])
        ):
            raise StoreFormatError(
                f"{where} disagrees with the manifest (graph count, fields, "
                f"edge_index dtype {store.edge_index_dtype} vs "
                f"{self.edge_index_dtype}, or sizes)"
            )
        return store

    def _locate(self, i: int) -> tuple[int, int]:
        s = int(np.searchsorted(self._starts, i, side="right")) - 1
        return s, i - int(self._starts[s])

    def close(self) -> None:
        """Close every opened shard (re-opened, with the checks, on next use)."""
        for store in self._shards:
            if store is not None:
                store.close()
        self._shards = [None] * len(self._shards)
        self._cache.clear()

    def __getstate__(self) -> dict:
        """For worker processes: no open shards, no cache; a copy opens its shards again and
        checks each against the manifest entry this object was opened with."""
        return self._worker_state(_shards=[None] * len(self._shards))

    # ------------------------------------------------------------ metadata (manifest only)
    @property
    def n_node(self) -> np.ndarray:
        return self._manifest.n_node

    @property
    def n_edge(self) -> np.ndarray:
        return self._manifest.n_edge

    @property
    def node_offsets(self) -> np.ndarray:
        if self._node_offsets is None:
            self._node_offsets = np.concatenate([[0], np.cumsum(self.n_node)]).astype(np.int64)
        return self._node_offsets

    @property
    def edge_offsets(self) -> np.ndarray:
        if self._edge_offsets is None:
            self._edge_offsets = np.concatenate([[0], np.cumsum(self.n_edge)]).astype(np.int64)
        return self._edge_offsets

    def __repr__(self) -> str:
        return (
            f"ShardedGraphStore({str(self.path)!r}, name={self.name!r}, graphs={len(self)}, "
            f"shards={self.n_shards}, fields={sorted(self.fields)})"
        )

    @property
    def failed_index(self) -> np.ndarray:
        """Source-record indices that failed conversion (global, from every shard)."""
        parts = [
            np.asarray(self.shard(s).failed_index)
            for s in range(self.n_shards)
            if self._manifest.shards[s].n_failed
        ]
        out = np.sort(np.concatenate([*parts, self._manifest.failed_without_shard]))
        out.flags.writeable = False
        return out

    def graph_field(self, name: str) -> np.ndarray:
        """The whole graph-level array ``name`` across shards (a read-only copy)."""
        parts = [self.shard(s).graph_field(name) for s in range(self.n_shards)]
        out = np.concatenate(parts)
        out.flags.writeable = False
        return out

    # ------------------------------------------------------------ graph data
    def read_graph(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` (global index) from its shard (as `GraphStore.read_graph`)."""
        s, local = self._locate(self._index(i))
        return self.shard(s).read_graph(local)

    def arrays(self, start: int = 0, stop: int | None = None) -> GraphArrays:
        """Graphs ``start:stop`` (global) as one `GraphArrays` (copies)."""
        start, stop = self._range(start, stop)
        if start == stop:
            return self.shard(0).arrays(0, 0)
        parts = []
        for s in range(self.n_shards):
            a, b = max(start, int(self._starts[s])), min(stop, int(self._starts[s + 1]))
            if a < b:
                base = int(self._starts[s])
                parts.append(self.shard(s).arrays(a - base, b - base))
        if len(parts) == 1:
            return parts[0]
        return GraphArrays.concat(parts)

    def _gather(self, idx: np.ndarray) -> tuple[PackedGraphs, np.ndarray]:
        """The graphs ``idx`` as an in-memory `PackedGraphs` grouped by shard, and the index
        list into it that restores the order of ``idx``."""
        edge_dtype = np.dtype(self._manifest.edge_index_dtype)
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        order = np.argsort(shard_of, kind="stable")  # packed graph j = batch slot order[j]
        nn, ne, eis = [], [], []
        per_level: dict[str, dict[str, list]] = {level: {} for level in LEVELS}
        for s in np.unique(shard_of):
            local = idx[order[shard_of[order] == s]] - self._starts[s]
            n_s = int(self.n_node[idx[shard_of == s]].sum())
            e_s = int(self.n_edge[idx[shard_of == s]].sum())
            g_s = int(local.shape[0])
            part = self.shard(int(s)).read_batch(
                local, (n_s + 1, e_s, g_s + 1), layout="jraph", index_dtype=np.int64
            )
            counts_n, counts_e = part.node_counts[:g_s], part.edge_counts[:g_s]
            nn.append(counts_n)
            ne.append(counts_e)
            eis.append(
                (
                    part.fields["edge_index"][:, :e_s] - np.repeat(part.node_ptr[:g_s], counts_e)
                ).astype(edge_dtype)
            )
            rows = {"node": n_s, "edge": e_s, "graph": g_s}
            for name, spec in self.fields.items():
                per_level[spec["level"]].setdefault(name, []).append(
                    part.fields[name][: rows[spec["level"]]]
                )
        nn_all = np.concatenate(nn) if nn else np.zeros(0, np.int64)
        ne_all = np.concatenate(ne) if ne else np.zeros(0, np.int64)
        arrays: dict[str, dict[str, np.ndarray]] = {level: {} for level in LEVELS}
        for name, spec in self.fields.items():
            level = spec["level"]
            chunks = per_level[level].get(name)
            arrays[level][name] = (
                np.concatenate(chunks)
                if chunks
                else np.zeros((0, *spec["shape"]), dtype=np.dtype(spec["dtype"]))
            )
        packed = PackedGraphs(
            n_node=nn_all,
            n_edge=ne_all,
            node_offsets=np.concatenate([[0], np.cumsum(nn_all)]).astype(np.int64),
            edge_offsets=np.concatenate([[0], np.cumsum(ne_all)]).astype(np.int64),
            edge_index=(np.concatenate(eis, axis=1) if eis else np.zeros((2, 0), edge_dtype)),
            **arrays,
        )
        back = np.empty(idx.shape[0], dtype=np.int64)
        back[order] = np.arange(idx.shape[0], dtype=np.int64)
        return packed, back

    def read_batch(
        self, index: ArrayLike, shape: tuple[int, int, int] | Sequence[int], **options: Any
    ) -> PaddedArrays:
        """Graphs ``index`` (global) as one padded batch of ``shape``: equal to what a
        single-file store with the same graphs returns (options as `GraphStore.read_batch`)."""
        idx = _index(index, len(self))
        budget = Budget.coerce(shape)
        n_real, e_real = int(self.n_node[idx].sum()), int(self.n_edge[idx].sum())
        if (
            idx.shape[0] > budget.graph_capacity
            or n_real > budget.node_capacity
            or e_real > budget.edge_capacity
        ):  # checked here to name global indices
            raise InputError(
                f"{idx.shape[0]} graphs with {n_real} nodes and {e_real} edges (dataset indices "
                f"{idx[:8].tolist()}...) do not fit the padded shape ({budget.n_node}, "
                f"{budget.n_edge}, {budget.n_graph}), which has room for {budget.graph_capacity} "
                f"graphs, {budget.node_capacity} real nodes and {budget.edge_capacity} real "
                "edges; the plan and the data disagree about graph sizes"
            )
        packed, back = self._gather(idx)
        out = pad_batch(packed, back, shape, **options)
        out.graph_index[: idx.shape[0]] = idx  # global dataset indices, not the gather's
        return out

    def check_intact(self) -> None:
        """`GraphStore.check_intact` of every shard opened so far."""
        for store in self._shards:
            if store is not None:
                store.check_intact()

    def verify(self) -> None:
        """Check every shard against the manifest and every array's CRC-32 in every shard;
        raises `StoreFormatError` naming the first damaged or replaced shard."""
        for s in range(self.n_shards):
            store = self.shard(s)
            try:
                store.verify()
            except StoreFormatError as exc:
                raise StoreFormatError(
                    f"{str(self.path)!r}: shard "
                    f"{str(self._manifest.shard_path(s))!r} is damaged: "
                    f"{exc}"
                ) from exc
