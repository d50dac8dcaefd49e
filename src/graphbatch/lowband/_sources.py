"""`EdgeGraphs` from the datasets layer: an ``.h5`` graph store or Python sources (code graphs).

Both go through ``graphbatch.datasets`` (its `GraphStore` and its ogbg-code2-style
``code_graphs``); this module only converts their `GraphArrays` (``n_node``, ``n_edge``,
``edge_index``, node/edge fields) into `EdgeGraphs` and builds no graphs of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from .._errors import InputError
from .._io import check_output_path
from ._bandwidth import Reordering, apply_reordering, reduce_bandwidth
from ._graphs import EdgeGraphs

if TYPE_CHECKING:
    from ..datasets import GraphArrays

__all__ = [
    "from_graph_arrays",
    "graphs_from_python",
    "graphs_from_store",
    "reorder_graph_arrays",
    "reorder_store",
]

#: Node field added by `reorder_graph_arrays`: the original local id of each node.
SOURCE_NODE_FIELD = "rcm_source_node"


def _datasets() -> ModuleType:
    try:
        from .. import datasets
    except ImportError as exc:
        raise InputError(
            "reading .h5 stores and .py sources needs graphbatch.datasets, which "
            "this installation lacks; give an EdgeGraphs .npz instead"
        ) from exc
    return datasets


def from_graph_arrays(
    arrays: GraphArrays, *, edge_type_field: str = "edge_type", num_edge_types: int | None = None
) -> EdgeGraphs:
    """`EdgeGraphs` from a ``graphbatch.datasets.GraphArrays``: edges, the edge-level field
    ``edge_type_field`` as edge types (all 0 when absent) and every node-level field as node data.
    """
    ei = np.asarray(arrays.edge_index, dtype=np.int64)
    etype = arrays.edge.get(edge_type_field)
    return EdgeGraphs(
        arrays.n_node,
        arrays.n_edge,
        ei[0],
        ei[1],
        None if etype is None else np.asarray(etype, dtype=np.int64),
        num_edge_types=num_edge_types,
        node_data=dict(arrays.node),
    )


def graphs_from_store(
    path: str | Path, *, limit: int | None = None, edge_type_field: str = "edge_type"
) -> EdgeGraphs:
    """The first ``limit`` (default all) graphs of an HDF5 store written by
    ``graphbatch data build``."""
    ds = _datasets()
    with ds.open_store(path) as store:
        stop = len(store) if limit is None else min(int(limit), len(store))
        if stop == 0:
            raise InputError(f"store {str(path)!r} holds no graphs")
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
        raise InputError(f"no Python functions found under {str(path)!r}")
    return EdgeGraphs.concatenate(parts)


def reorder_graph_arrays(
    arrays: GraphArrays,
    *,
    edge_type_field: str = "edge_type",
) -> tuple[GraphArrays, Reordering]:
    """RCM-reorder a ``GraphArrays`` chunk: ``(new GraphArrays, Reordering)``.

    Node fields are permuted with the nodes and gain ``rcm_source_node`` (each node's original
    local id); edges keep their order (only their endpoints are renumbered), so edge fields stay
    aligned; graph fields are unchanged.
    """
    ds = _datasets()
    graphs = from_graph_arrays(arrays, edge_type_field=edge_type_field)
    reordering: Reordering = reduce_bandwidth(graphs)
    out = apply_reordering(graphs, reordering)
    if SOURCE_NODE_FIELD in arrays.node:
        raise InputError(f"node field {SOURCE_NODE_FIELD!r} exists already: reordered twice?")
    dtype = np.asarray(arrays.edge_index).dtype
    node = {k: np.asarray(v) for k, v in out.node_data.items()}
    node[SOURCE_NODE_FIELD] = reordering.perm.astype(np.int32)
    new = ds.GraphArrays(
        n_node=arrays.n_node,
        n_edge=arrays.n_edge,
        edge_index=np.stack([out.senders, out.receivers]).astype(dtype),
        node=node,
        edge=dict(arrays.edge),
        graph=dict(arrays.graph),
    )
    return new, reordering


def reorder_store(
    src: str | Path, dst: str | Path, *, chunk_size: int = 4096, edge_type_field: str = "edge_type"
) -> Reordering:
    """Write ``dst``: the store ``src`` with every graph RCM-reordered (one-time preprocessing;
    see `reorder_graph_arrays`). Returns the concatenated `Reordering` of all graphs."""
    ds = _datasets()
    check_output_path(dst, [src], "dst", suffixes=(".h5", ".hdf5"), what="reordered store")
    parts: list[Reordering] = []
    with ds.open_store(src) as store:
        if len(store) == 0:
            raise InputError(f"store {str(src)!r} holds no graphs")

        def chunks() -> Iterator[GraphArrays]:
            for a in range(0, len(store), chunk_size):
                new, r = reorder_graph_arrays(
                    store.arrays(a, min(a + chunk_size, len(store))),
                    edge_type_field=edge_type_field,
                )
                parts.append(r)
                yield new

        ds.write_store(dst, chunks(), name=f"{Path(src).stem} (RCM-reordered)")
    return Reordering(
        *(
            np.concatenate([getattr(r, f) for r in parts])
            for f in ("perm", "before", "after", "rcm", "used_rcm")
        )
    )
