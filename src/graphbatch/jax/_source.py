"""Graph sources of the JAX loader: a map-style dataset of single-graph ``jraph.GraphsTuple``s,
or a `graphbatch.datasets.GraphStore` viewed as one; and `make_padded`, the one step that turns
an index list and a padded shape into host arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jraph
import numpy as np

from .._errors import InputError, InputTypeError
from .._sizes import GraphSizes
from .._source import GraphSource
from ._collate import PaddedGraphs, collate

__all__ = ["StoreGraphs", "as_graph_source", "graph_sizes_of", "make_padded"]


class StoreGraphs:
    """A `GraphStore` as a map-style dataset of single-graph ``jraph.GraphsTuple`` objects.

    ``nodes``/``edges``/``globals`` are dicts of the store's node-, edge- and graph-level fields
    (graph fields keep their leading dimension of 1); ``senders``/``receivers`` are the store's
    ``edge_index`` rows as int32; counts are int32. Reads go through the store's LRU cache.
    ``graph_sizes()`` comes from the store's metadata (no graph is read).
    """

    def __init__(self, store: GraphSource) -> None:
        self.store = store
        levels = {name: spec["level"] for name, spec in store.fields.items()}
        self._fields = {
            lvl: [k for k, v in levels.items() if v == lvl] for lvl in ("node", "edge", "graph")
        }

    def __len__(self) -> int:
        return len(self.store)

    def graph_sizes(self) -> GraphSizes:
        return self.store.graph_sizes()

    def read_batch(
        self,
        indices: Sequence[int] | np.ndarray,
        shape: tuple[int, int, int],
        *,
        cutoff: float | None = None,
        position_key: str = "pos",
    ) -> PaddedGraphs:
        """Graphs ``indices`` padded to ``shape`` in jraph's layout, read at batch level by the
        store's ``read_batch`` (memory maps; per shard for a sharded store), equal to `collate`
        of ``[self[i] for i in indices]``."""
        if cutoff is not None and position_key not in self._fields["node"]:
            raise InputError(
                f"cutoff needs node positions: the store has no node-level field {position_key!r}"
            )
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        pad = self.store.read_batch(
            idx,
            shape,
            layout="jraph",
            cutoff=cutoff,
            position_key=position_key,
            index_dtype=np.int64,
        )
        f = pad.fields
        graphs = jraph.GraphsTuple(
            n_node=pad.node_counts.astype(np.int32),
            n_edge=pad.edge_counts.astype(np.int32),
            nodes={k: f[k] for k in self._fields["node"]},
            edges={k: f[k] for k in self._fields["edge"]},
            globals={k: f[k] for k in self._fields["graph"]},
            senders=f["edge_index"][0],
            receivers=f["edge_index"][1],
        )
        return PaddedGraphs(
            graphs=graphs,
            node_mask=pad.node_mask,
            edge_mask=pad.edge_mask,
            graph_mask=pad.graph_mask,
            graph_index=pad.graph_index,
        )

    def __getitem__(self, i: int) -> jraph.GraphsTuple:
        g = self.store[i]
        ei = g["edge_index"]
        n = next((g[k].shape[0] for k in self._fields["node"]), None)
        if n is None:  # no node fields: the node count comes from the size table
            n = int(self.store.n_node[int(i)])
        return jraph.GraphsTuple(
            n_node=np.array([n], dtype=np.int32),
            n_edge=np.array([ei.shape[1]], dtype=np.int32),
            nodes={k: g[k] for k in self._fields["node"]},
            edges={k: g[k] for k in self._fields["edge"]},
            globals={k: g[k] for k in self._fields["graph"]},
            senders=np.asarray(ei[0], dtype=np.int32),
            receivers=np.asarray(ei[1], dtype=np.int32),
        )


def as_graph_source(source: Any) -> Any:
    """``source`` as a map-style dataset of ``GraphsTuple``s (a `GraphStore` becomes a
    `StoreGraphs`); anything without ``len`` and ``[i]`` raises ``TypeError``."""
    if isinstance(source, GraphSource):  # a store of either kind
        return StoreGraphs(source)
    if not hasattr(source, "__len__") or not hasattr(source, "__getitem__"):
        raise InputTypeError(
            f"source must be a GraphStore or a map-style dataset (len and [i]) of "
            f"jraph.GraphsTuple, got {type(source).__name__}"
        )
    return source


def graph_sizes_of(source: Any, indices: np.ndarray | None = None) -> GraphSizes:
    """Node and edge counts of every graph (of the graphs ``indices``, in that order, when
    given): ``source.graph_sizes()`` when it has one (a store's metadata), else read from each
    graph's ``n_node``/``n_edge`` (one pass over the graphs)."""
    get = getattr(source, "graph_sizes", None)
    if callable(get):
        sizes = get()
        if not isinstance(sizes, GraphSizes) or len(sizes) != len(source):
            raise InputError(
                f"{type(source).__name__}.graph_sizes() must return a GraphSizes with one entry "
                f"per graph ({len(source)})"
            )
        return sizes if indices is None else sizes.subset(indices)
    items = range(len(source)) if indices is None else np.asarray(indices).tolist()
    nodes = np.empty(len(items), dtype=np.int64)
    edges = np.empty(len(items), dtype=np.int64)
    for k, i in enumerate(items):
        g = source[i]
        if not isinstance(g, jraph.GraphsTuple):
            raise InputTypeError(f"source[{i}] is a {type(g).__name__}, not a jraph.GraphsTuple")
        if np.shape(g.n_node) != (1,):
            raise InputError(
                f"source[{i}] holds {np.shape(g.n_node)} graphs; each item must be "
                "a single graph (n_node of shape (1,))"
            )
        nodes[k] = int(g.n_node[0])
        edges[k] = int(g.n_edge[0])
    return GraphSizes(nodes, edges)


def make_padded(
    source: Any,
    indices: Sequence[int] | np.ndarray,
    shape: tuple[int, int, int],
    *,
    template: jraph.GraphsTuple | None,
    cutoff: float | None = None,
    position_key: str = "pos",
) -> PaddedGraphs:
    """Host (NumPy) `PaddedGraphs` of the graphs ``indices`` of ``source`` padded to ``shape``.

    The loader's only data path. A `StoreGraphs` source is read at batch level: one vectorised
    gather per array of the store straight into jraph's padded layout
    (`graphbatch._padbatch.pad_batch` with ``layout="jraph"``, no per-graph objects); the result
    equals the per-graph reads plus `collate`. Other sources: per-graph reads plus `collate`,
    which concatenates them and pads through the same kernel.
    """
    if isinstance(source, StoreGraphs):
        return source.read_batch(indices, shape, cutoff=cutoff, position_key=position_key)
    graphs = [source[int(i)] for i in indices]
    return collate(
        graphs,
        shape,
        graph_index=np.asarray(indices, dtype=np.int64),
        cutoff=cutoff,
        position_key=position_key,
        template=template,
    )
