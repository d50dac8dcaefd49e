"""What a graph source is: `GraphSource`, the interface the loaders read batches through.

A graph source holds ``len(source)`` graphs, each a set of named arrays at three levels
(``fields``: name -> ``{"level": "node" | "edge" | "graph", "dtype": NumPy dtype string,
"shape": trailing shape}``, plus ``edge_index`` ``[2, E]`` with node indices local to the
graph). It gives the per-graph sizes without reading graph data, one graph by index, and a
whole padded batch read straight into the padding kernel's layout -- no per-graph object. The
single-file `graphbatch.datasets.GraphStore` and the `graphbatch.datasets.ShardedGraphStore`
implement it; the torch and JAX adapters check ``isinstance(x, GraphSource)`` to take their
store batch path, without importing `graphbatch.datasets`.

This module is the core: it imports nothing but the standard library at run time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ._padbatch import PaddedArrays
    from ._sizes import GraphSizes

__all__ = ["GraphSource"]


class GraphSource(ABC):
    """Graphs read by index: sizes from metadata, one graph, or one padded batch.

    Attributes every source sets: ``name`` (str), ``fields`` (the field table above; never
    includes ``edge_index``) and ``meta`` (a JSON-able dict: what built the graphs, e.g. the
    cutoff and elements of an atomistic store, or the torch dtypes of `to_store`'s fields).
    ``source[i]`` is ``source.get(i)``.
    """

    name: str
    fields: dict[str, dict]
    meta: dict

    @abstractmethod
    def __len__(self) -> int:
        """The number of graphs ``G``."""

    @property
    @abstractmethod
    def n_node(self) -> np.ndarray:
        """int64 ``[G]``: nodes per graph (metadata: no graph data is read)."""

    @property
    @abstractmethod
    def n_edge(self) -> np.ndarray:
        """int64 ``[G]``: edges per graph (metadata)."""

    @abstractmethod
    def graph_sizes(self) -> GraphSizes:
        """Per-graph ``n_node``, ``n_edge`` and ``n_bytes`` (what a planner reads)."""

    @abstractmethod
    def read_batch(self, index: Any, shape: Any, **options: Any) -> PaddedArrays:
        """Graphs ``index`` (in that order) as one padded batch of ``shape`` (``(nodes,
        edges, graphs)`` slots, padding included), as `graphbatch._padbatch.pad_batch`
        returns it; ``options`` are `pad_batch`'s keywords (``layout``, ``cutoff``,
        ``index_dtype``, ...). ``graph_index`` holds the source's indices."""

    @abstractmethod
    def read_graph(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i``: ``{"edge_index": [2, E], field: array}`` (read-only copies;
        graph-level fields keep a leading dimension of 1)."""

    @abstractmethod
    def get(self, i: int) -> dict[str, np.ndarray]:
        """Graph ``i`` as `read_graph` gives it, possibly through a cache."""

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.get(i)

    @abstractmethod
    def check_intact(self) -> None:
        """Raise the source's error if data it serves has become unreadable since it was
        opened (a store file truncated while open); what a loader calls to explain a worker
        that died reading it."""
