"""`EdgeGraphs` from the datasets layer: an ``.h5`` graph store or Python sources (code graphs).

Both go through ``graphbatch.datasets`` (its `GraphStore` and its ogbg-code2-style
``code_graphs``); this module only converts their `GraphArrays` (``n_node``, ``n_edge``,
``edge_index``, node/edge fields) into `EdgeGraphs` and builds no graphs of its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._graphs import EdgeGraphs

__all__ = ["from_graph_arrays", "graphs_from_python", "graphs_from_store"]


def _datasets():
    try:
        from .. import datasets
    except ImportError as exc:
        raise ValueError("reading .h5 stores and .py sources needs graphbatch.datasets, which "
                         "this installation lacks; give an EdgeGraphs .npz instead") from exc
    return datasets


def from_graph_arrays(arrays, *, edge_type_field: str = "edge_type",
                      num_edge_types: int | None = None) -> EdgeGraphs:
    """`EdgeGraphs` from a ``graphbatch.datasets.GraphArrays``: edges, the edge-level field
    ``edge_type_field`` as edge types (all 0 when absent) and every node-level field as node data.
    """
    ei = np.asarray(arrays.edge_index, dtype=np.int64)
    etype = arrays.edge.get(edge_type_field)
    return EdgeGraphs(arrays.n_node, arrays.n_edge, ei[0], ei[1],
                      None if etype is None else np.asarray(etype, dtype=np.int64),
                      num_edge_types=num_edge_types, node_data=dict(arrays.node))


def graphs_from_store(path: str | Path, *, limit: int | None = None,
                      edge_type_field: str = "edge_type") -> EdgeGraphs:
    """The first ``limit`` (default all) graphs of an HDF5 store written by
    ``graphbatch data build``."""
    ds = _datasets()
    with ds.GraphStore(path) as store:
        stop = len(store) if limit is None else min(int(limit), len(store))
        if stop == 0:
            raise ValueError(f"store {str(path)!r} holds no graphs")
        return from_graph_arrays(store.arrays(0, stop), edge_type_field=edge_type_field)


def graphs_from_python(path: str | Path, *, limit: int | None = None) -> EdgeGraphs:
    """Function-level code graphs (AST + next-token edges and their reverses: 4 edge types) of
    one ``.py`` file or every ``.py`` file under a directory, via ``graphbatch.datasets``."""
    ds = _datasets()
    path = Path(path)
    if path.is_file():
        chunks = ds.code_graphs(path.parent, files=[path], limit=limit, reverse_edges=True)
    else:
        chunks = ds.code_graphs(path, limit=limit, reverse_edges=True)
    parts = [from_graph_arrays(c, num_edge_types=len(ds.CODE_EDGE_TYPES)) for c in chunks]
    if not parts:
        raise ValueError(f"no Python functions found under {str(path)!r}")
    return EdgeGraphs.concatenate(parts)
