"""What the single-file `GraphStore` and the `ShardedGraphStore` share: `StoreBase`.

Both are `graphbatch._source.GraphSource`s opened from a path with the same options; this
base keeps those options, the per-graph LRU cache behind ``get``/``[i]``, the index checks,
``graph_sizes`` (computed from the sizes and the field table) and the context manager, and
declares what every store adds to a graph source (``verify``, ``arrays``, ``graph_field``,
``failed_index``, offsets, ``close``). Each store implements the reads its own way; nothing
here is overridden.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import numpy as np

from .._errors import InputTypeError
from .._sizes import GraphSizes
from .._source import GraphSource
from .._validate import as_nonnegative_int
from ._graphs import GraphArrays

__all__ = ["StoreBase"]


def _torch_nbytes(dtype: np.dtype) -> int:
    """Bytes per element once materialised as a torch tensor (int64 / float32 / bool)."""
    kind = np.dtype(dtype).kind
    return 1 if kind == "b" else 8 if kind in "iu" else 4


class StoreBase(GraphSource):
    """A graph store opened from ``path``: options, LRU cache and index checks.

    ``cache_size``: graphs kept by ``get``/``[i]`` (0: none); ``in_memory``: read arrays into
    RAM instead of mapping them; ``check_chunks``: CRC-check each check chunk on its first
    read. Subclasses set ``name``, ``uuid``, ``fields``, ``meta`` and ``edge_index_dtype``.
    """

    uuid: str
    edge_index_dtype: np.dtype

    def __init__(
        self, path: str | os.PathLike, cache_size: int, in_memory: bool, check_chunks: bool
    ) -> None:
        self.path = Path(path)
        self.cache_size = as_nonnegative_int(cache_size, "cache_size")
        self.in_memory = bool(in_memory)
        self.check_chunks = bool(check_chunks)
        self._cache: OrderedDict[int, dict] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _worker_state(self, **closed: Any) -> dict:
        """``__dict__`` for a pickled copy (a worker process): ``closed`` (the open handles,
        set to their closed values), an empty cache with zero counts, and memory maps rather
        than a private copy of the data (``in_memory=False``)."""
        state = self.__dict__.copy()
        state.update(closed, _cache=OrderedDict(), hits=0, misses=0, in_memory=False)
        return state

    # ------------------------------------------------------------ what every store reads
    @property
    @abstractmethod
    def node_offsets(self) -> np.ndarray:
        """int64 ``[G + 1]``: graph ``g``'s nodes are rows ``node_offsets[g]:[g + 1]``."""

    @property
    @abstractmethod
    def edge_offsets(self) -> np.ndarray:
        """int64 ``[G + 1]``: graph ``g``'s edges are rows ``edge_offsets[g]:[g + 1]``."""

    @property
    @abstractmethod
    def failed_index(self) -> np.ndarray:
        """Source-record indices that failed conversion when the store was built."""

    @abstractmethod
    def graph_field(self, name: str) -> np.ndarray:
        """The whole graph-level array ``name`` (``[G, ...]``, read-only)."""

    @abstractmethod
    def arrays(self, start: int = 0, stop: int | None = None) -> GraphArrays:
        """Graphs ``start:stop`` as one `GraphArrays` (copies)."""

    @abstractmethod
    def verify(self) -> None:
        """Check every array's CRC-32; raise `StoreFormatError` naming the first damaged one."""

    @abstractmethod
    def close(self) -> None:
        """Release open files and maps (re-opened, with the identity checks, on next use)."""

    # ------------------------------------------------------------ shared
    def __len__(self) -> int:
        return int(self.n_node.shape[0])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def graph_sizes(self) -> GraphSizes:
        """Per-graph ``n_node``, ``n_edge`` and ``n_bytes`` (bytes of the graph's tensors once
        materialised in torch: ints as int64, floats as float32), read from metadata only."""

        def per_row(level: str) -> int:
            return sum(
                _torch_nbytes(s["dtype"]) * int(np.prod(s["shape"], dtype=np.int64))
                for s in self.fields.values()
                if s["level"] == level
            )

        n_bytes = (
            self.n_node * per_row("node") + self.n_edge * (16 + per_row("edge")) + per_row("graph")
        )
        return GraphSizes(self.n_node, self.n_edge, n_bytes)

    def _index(self, i: Any) -> int:
        """``i`` as an index in ``0..len - 1`` (negative counts from the end)."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise InputTypeError(f"graph index must be an int, got {i!r}")
        n = len(self)
        if not -n <= int(i) < n:
            raise IndexError(f"graph index {int(i)} out of range for {n} graphs")
        return int(i) % n

    def _range(self, start: int, stop: int | None) -> tuple[int, int]:
        """``start:stop`` (``stop`` None: the end) checked to lie within ``0:len``."""
        stop = len(self) if stop is None else int(stop)
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"range {start}:{stop} is outside 0:{len(self)}")
        return int(start), stop

    def get(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` through the LRU cache (arrays are read-only; copy before modifying)."""
        i = self._index(i)
        hit = self._cache.get(i)
        if hit is not None:
            self._cache.move_to_end(i)
            self.hits += 1
            return hit
        self.misses += 1
        graph = self.read_graph(i)
        if self.cache_size:
            self._cache[i] = graph
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return graph

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield self.read_graph(i)

    def cache_info(self) -> dict[str, int]:
        """``hits``, ``misses``, ``size`` and ``maxsize`` of the materialised-graph LRU cache."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "size": len(self._cache),
            "maxsize": self.cache_size,
        }

    def clear_cache(self) -> None:
        self._cache.clear()
        self.hits = self.misses = 0
